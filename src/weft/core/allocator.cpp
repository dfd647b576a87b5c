// The CPU caching allocator, after PyTorch's c10/cuda/CUDACachingAllocator.cpp: the same pools,
// rounding, split and merge rules and statistic names, so that its figures read the same way.
#include "weft/core/allocator.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/error.h"

namespace weft {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMinBlockSize = 512;                 // every block size is a multiple of this
constexpr size_t kSmallRequestMax = size_t{1} << 20;  // requests up to 1 MiB use the small pool
constexpr size_t kSmallSegmentSize = size_t{2} << 20;
constexpr size_t kLargeSegmentRounding = size_t{2} << 20;
// Larger requests fail at once: rounding them could overflow, and the statistics are int64.
constexpr size_t kMaxRequest = size_t{1} << 62;
constexpr size_t kMaxTraceEvents = 1'000'000;

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

std::string format_size(double bytes) {
  if (std::abs(bytes) < 1024) return str(static_cast<int64_t>(bytes), " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = bytes / 1024;
  size_t unit = 0;
  // Moves up a unit before the value would print as "1024.00".
  while (unit + 1 < std::size(kUnits) && std::abs(value) >= 1023.995) {
    value /= 1024;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

std::string format_percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

struct Block;
struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const;
};
using FreeSet = std::set<Block*, BySizeThenAddress>;
using LiveMap = std::unordered_map<void*, Block*>;

// A range of one segment. The blocks of a segment form a doubly linked list in address order;
// the block without a predecessor starts at the segment's base and so owns the system memory.
struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  FreeSet* pool = nullptr;  // the free set that holds this block while it is free
  Block* prev = nullptr;
  Block* next = nullptr;
  bool allocated = false;

  // Free neighbours are always merged, so a free block with any neighbour shares its segment
  // with an allocated block: its bytes are PyTorch's "inactive split" memory.
  bool is_split() const { return prev || next; }
};

bool BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return std::less<char*>{}(a->ptr, b->ptr);
}

struct Gauge {
  int64_t current = 0, peak = 0;
  void add(int64_t delta) {
    current += delta;
    peak = std::max(peak, current);
  }
};

struct TraceEvent {
  const char* action;
  uintptr_t addr;
  int64_t size;
  std::string what;
  int64_t allocated_after, reserved_after, seq;
};

enum class OomCause { kLimit, kSystem, kTooLarge };

int64_t memory_limit_from_environment() {
  const char* text = std::getenv("WEFT_MEMORY_LIMIT");
  // Set but empty (`WEFT_MEMORY_LIMIT= weft ...`) reads as unset, as most tools treat it.
  if (!text || std::string_view(text).find_first_not_of(" \t") == std::string_view::npos) return 0;
  try {
    return parse_bytes(text);
  } catch (const ValueError& error) {
    throw ValueError(str("invalid environment variable WEFT_MEMORY_LIMIT=\"", text, "\": ", error.what(),
                         "; unset it for no limit"));
  }
}

}  // namespace

struct CachingAllocator::Impl {
  explicit Impl(SegmentSource segments) : source(segments) {}
  const SegmentSource source;
  mutable std::mutex mutex;
  FreeSet small_free, large_free;
  LiveMap live_blocks;  // how deallocate finds a block, and tells a foreign pointer

  // Erased container nodes and retired Block records are reused, so that once warm an
  // allocate / deallocate pair never calls malloc.
  std::vector<FreeSet::node_type> spare_free_nodes;
  std::vector<LiveMap::node_type> spare_live_nodes;
  std::deque<Block> block_records;  // owns every Block; a deque never moves its elements
  Block* spare_blocks = nullptr;    // retired records, chained through Block::next

  Gauge allocated, reserved, inactive_split;
  int64_t num_allocs = 0, num_frees = 0, cache_hits = 0, cache_misses = 0;
  int64_t num_segments = 0, num_ooms = 0;
  int64_t limit = 0;

  bool tracing = false;
  int64_t next_seq = 0;
  std::deque<TraceEvent> trace;

  ~Impl() {
    const auto release_if_segment_head = [this](const Block* block) {
      if (!block->prev) source.release(block->ptr);
    };
    std::ranges::for_each(small_free, release_if_segment_head);
    std::ranges::for_each(large_free, release_if_segment_head);
    for (const auto& entry : live_blocks) release_if_segment_head(entry.second);
  }

  void* allocate(size_t nbytes, const RequestText& what) {
    if (nbytes > kMaxRequest) throw_oom(nbytes, what, OomCause::kTooLarge, 0);
    const size_t size = round_up(std::max(nbytes, size_t{1}), kMinBlockSize);
    FreeSet& pool = size <= kSmallRequestMax ? small_free : large_free;
    Block* block = take_best_fit(pool, size);
    if (block) {
      ++cache_hits;
    } else {
      block = reserve_segment(pool, size, nbytes, what);
      ++cache_misses;
    }
    split_off_remainder(block, size);
    insert_live(block);
    block->allocated = true;
    allocated.add(static_cast<int64_t>(block->size));
    ++num_allocs;
    record("alloc", block->ptr, block->size, what);
    return block->ptr;
  }

  void deallocate(void* ptr) {
    const auto found = live_blocks.find(ptr);
    if (found == live_blocks.end()) {
      throw ValueError(str("deallocate: pointer ", ptr,
                           " was not allocated by this allocator, or was already freed"));
    }
    Block* block = found->second;
    spare_live_nodes.push_back(live_blocks.extract(found));
    block->allocated = false;
    allocated.add(-static_cast<int64_t>(block->size));
    ++num_frees;
    record("free", block->ptr, block->size, {});
    insert_free(merge_free_neighbours(block));
  }

  Block* take_best_fit(FreeSet& pool, size_t size) {
    Block key{.size = size};
    const auto best = pool.lower_bound(&key);
    if (best == pool.end()) return nullptr;
    Block* block = *best;
    erase_free(block);
    return block;
  }

  Block* reserve_segment(FreeSet& pool, size_t size, size_t nbytes, const RequestText& what) {
    const size_t segment_size =
        &pool == &small_free ? kSmallSegmentSize : round_up(size, kLargeSegmentRounding);
    if (!within_limit(segment_size)) {
      release_free_segments();
      if (!within_limit(segment_size)) throw_oom(nbytes, what, OomCause::kLimit, segment_size);
    }
    void* base = source.reserve(segment_size);
    if (!base) {
      release_free_segments();
      base = source.reserve(segment_size);
      if (!base) throw_oom(nbytes, what, OomCause::kSystem, segment_size);
    }
    reserved.add(static_cast<int64_t>(segment_size));
    ++num_segments;
    record("segment_alloc", base, segment_size, what);
    return new_block({.ptr = static_cast<char*>(base), .size = segment_size, .pool = &pool});
  }

  bool within_limit(size_t segment_size) const {
    return limit == 0 || reserved.current + static_cast<int64_t>(segment_size) <= limit;
  }

  // PyTorch's rule: a small block splits off any remainder, a large block only one too big for
  // the small pool (> 1 MiB), so that large segments are not shredded into slivers.
  void split_off_remainder(Block* block, size_t size) {
    const size_t remaining = block->size - size;
    const bool worth_splitting =
        block->pool == &small_free ? remaining >= kMinBlockSize : remaining > kSmallRequestMax;
    if (!worth_splitting) return;
    Block* rest = new_block({.ptr = block->ptr + size, .size = remaining, .pool = block->pool,
                             .prev = block, .next = block->next});
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    insert_free(rest);
  }

  Block* merge_free_neighbours(Block* block) {
    if (Block* prev = block->prev; prev && !prev->allocated) {
      erase_free(prev);
      prev->size += block->size;
      unlink_and_retire(block);
      block = prev;
    }
    if (Block* next = block->next; next && !next->allocated) {
      erase_free(next);
      block->size += next->size;
      unlink_and_retire(next);
    }
    return block;
  }

  // A cached block keeps its is_split() state (only merges and splits change a block's
  // neighbours, and both take it out of the cache first), so these keep inactive_split exact.
  void insert_free(Block* block) {
    if (spare_free_nodes.empty()) {
      block->pool->insert(block);
    } else {
      FreeSet::node_type node = std::move(spare_free_nodes.back());
      spare_free_nodes.pop_back();
      node.value() = block;
      block->pool->insert(std::move(node));
    }
    if (block->is_split()) inactive_split.add(static_cast<int64_t>(block->size));
  }

  void erase_free(Block* block) {
    spare_free_nodes.push_back(block->pool->extract(block));
    if (block->is_split()) inactive_split.add(-static_cast<int64_t>(block->size));
  }

  void insert_live(Block* block) {
    if (spare_live_nodes.empty()) {
      live_blocks.emplace(block->ptr, block);
      return;
    }
    LiveMap::node_type node = std::move(spare_live_nodes.back());
    spare_live_nodes.pop_back();
    node.key() = block->ptr;
    node.mapped() = block;
    live_blocks.insert(std::move(node));
  }

  Block* new_block(const Block& fields) {
    Block* block = spare_blocks;
    if (!block) return &block_records.emplace_back(fields);
    spare_blocks = block->next;
    *block = fields;
    return block;
  }

  void unlink_and_retire(Block* block) {
    if (block->prev) block->prev->next = block->next;
    if (block->next) block->next->prev = block->prev;
    block->next = spare_blocks;
    spare_blocks = block;
  }

  void release_free_segments() {
    for (FreeSet* pool : {&small_free, &large_free}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* block = *it;
        if (block->is_split()) {
          ++it;
          continue;
        }
        spare_free_nodes.push_back(pool->extract(it++));
        reserved.add(-static_cast<int64_t>(block->size));
        --num_segments;
        record("segment_free", block->ptr, block->size, {});
        source.release(block->ptr);
        unlink_and_retire(block);
      }
    }
  }

  [[noreturn]] void throw_oom(size_t nbytes, const RequestText& what, OomCause cause, size_t segment_size) {
    ++num_ooms;
    record("oom", nullptr, nbytes, what);
    const std::string request = what ? what() : std::string();
    const MemoryStats now = snapshot();
    const std::string limit_text = limit ? format_bytes(limit) : "none";
    std::string reason, remedy;
    switch (cause) {
      case OomCause::kLimit:
        reason = str("limit ", limit_text);
        remedy = "raise WEFT_MEMORY_LIMIT (or set_memory_limit())";
        break;
      case OomCause::kSystem:
        reason = str(source.where, " could not supply a ", format_size(static_cast<double>(segment_size)),
                     " segment (limit ", limit_text, ")");
        remedy = str("free memory on ", source.where);
        break;
      case OomCause::kTooLarge:
        reason = str("no segment that large can be reserved (limit ", limit_text, ")");
        remedy = "check how the size was computed";
        break;
    }
    // The cache is already released at this point, so advising empty_cache() would not help.
    throw OutOfMemoryError(
        str("out of memory: tried to allocate ", format_size(static_cast<double>(nbytes)),
            request.empty() ? "" : " for ", request, "; ", reason, ", ", format_bytes(now.allocated_bytes),
            " allocated, ", format_bytes(now.reserved_bytes), " reserved, ",
            format_bytes(now.reserved_bytes - now.allocated_bytes), " free in cache (largest free block ",
            format_bytes(now.largest_free_block), ", fragmentation ", format_percent(now.fragmentation),
            "). Reduce the batch size, enable activation checkpointing, or ", remedy, "."),
        static_cast<int64_t>(nbytes));
  }

  void record(const char* action, const void* addr, size_t size, const RequestText& what) {
    if (!tracing) return;
    // Drops the oldest events: those leading up to a failure are the ones worth keeping, and the
    // gap in `seq` shows that some were dropped.
    if (trace.size() == kMaxTraceEvents) trace.pop_front();
    trace.push_back({action, reinterpret_cast<uintptr_t>(addr), static_cast<int64_t>(size),
                     what ? what() : std::string(), allocated.current, reserved.current, next_seq++});
  }

  MemoryStats snapshot() const {
    MemoryStats s;
    s.allocated_bytes = s.active_bytes = allocated.current;
    s.peak_allocated_bytes = s.peak_active_bytes = allocated.peak;
    s.reserved_bytes = reserved.current;
    s.peak_reserved_bytes = reserved.peak;
    s.inactive_split_bytes = inactive_split.current;
    s.peak_inactive_split_bytes = inactive_split.peak;
    s.num_allocs = num_allocs;
    s.num_frees = num_frees;
    s.cache_hits = cache_hits;
    s.cache_misses = cache_misses;
    s.num_segments = num_segments;
    s.num_ooms = num_ooms;
    for (const FreeSet* pool : {&small_free, &large_free}) {
      if (pool->empty()) continue;
      s.largest_free_block = std::max(s.largest_free_block, static_cast<int64_t>((*pool->rbegin())->size));
    }
    const int64_t free_bytes = reserved.current - allocated.current;
    if (free_bytes > 0) {
      s.fragmentation = 1.0 - static_cast<double>(s.largest_free_block) / static_cast<double>(free_bytes);
    }
    return s;
  }
};

CachingAllocator& CachingAllocator::cpu() {
  // Leaked on purpose: tensors destroyed during static destruction must still find a live
  // allocator. A bad WEFT_MEMORY_LIMIT throws here, and again on every use until it is fixed.
  static CachingAllocator* const instance = [] {
    const int64_t limit = memory_limit_from_environment();
    auto* allocator = new CachingAllocator;
    allocator->set_memory_limit(limit);
    return allocator;
  }();
  return *instance;
}

namespace {
std::atomic<CachingAllocator*> registered_allocators[2];  // by Device::Type; null: the default
}  // namespace

CachingAllocator* allocator_for(Device::Type type) {
  CachingAllocator* registered = registered_allocators[static_cast<size_t>(type)].load(std::memory_order_acquire);
  if (registered || type != Device::Type::cpu) return registered;
  return &CachingAllocator::cpu();
}

CachingAllocator* register_allocator(Device::Type type, CachingAllocator* allocator) {
  CachingAllocator* replaced = allocator_for(type);
  registered_allocators[static_cast<size_t>(type)].store(allocator, std::memory_order_release);
  return replaced;
}

SegmentSource host_segments() {
  return {.reserve = [](size_t nbytes) { return std::aligned_alloc(kAlignment, nbytes); },
          .release = [](void* segment) { std::free(segment); },
          .where = "the host"};
}

CachingAllocator::CachingAllocator(SegmentSource source) : impl_(std::make_unique<Impl>(source)) {}
CachingAllocator::~CachingAllocator() = default;

namespace {

std::atomic<bool> timing_calls{false};
thread_local int64_t call_ns = 0;

// Adds the time from construction to destruction to this thread's call_ns, when timing is on.
class CallTimer {
 public:
  CallTimer() : on_(timing_calls.load(std::memory_order_relaxed)) {
    if (on_) [[unlikely]]
      start_ = std::chrono::steady_clock::now();
  }
  ~CallTimer() {
    if (on_) [[unlikely]]
      call_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

void CachingAllocator::time_calls(bool on) { timing_calls.store(on, std::memory_order_relaxed); }
int64_t CachingAllocator::thread_call_ns() { return call_ns; }

void* CachingAllocator::allocate(size_t nbytes, const RequestText& what) {
  CallTimer timer;
  std::lock_guard lock(impl_->mutex);
  return impl_->allocate(nbytes, what);
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  CallTimer timer;
  std::lock_guard lock(impl_->mutex);
  impl_->deallocate(ptr);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->snapshot();
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(impl_->mutex);
  for (Gauge* gauge : {&impl_->allocated, &impl_->reserved, &impl_->inactive_split}) gauge->peak = gauge->current;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(impl_->mutex);
  impl_->release_free_segments();
}

std::string CachingAllocator::memory_summary() const {
  const MemoryStats s = stats();
  const int64_t limit = memory_limit();
  constexpr int kWidth = 67;  // between the outer bars, matching the rows below
  std::string out;
  char line[128];
  const auto rule = [&](char fill) { out += '|' + std::string(kWidth, fill) + "|\n"; };
  const auto full_width = [&](const std::string& text) {
    std::snprintf(line, sizeof line, "| %-*s|\n", kWidth - 1, text.c_str());
    out += line;
  };
  const auto row = [&](const char* name, const std::string& current, const std::string& peak) {
    std::snprintf(line, sizeof line, "| %-30s| %15s | %15s |\n", name, current.c_str(), peak.c_str());
    out += line;
  };
  const auto bytes_row = [&](const char* name, int64_t current, int64_t peak) {
    row(name, format_bytes(current), format_bytes(peak));
  };
  const auto count_row = [&](const char* name, int64_t count) { row(name, std::to_string(count), ""); };

  rule('=');
  full_width("weft CPU caching allocator: memory summary");
  rule('=');
  row("Metric", "Current", "Peak");
  rule('-');
  bytes_row("Allocated memory", s.allocated_bytes, s.peak_allocated_bytes);
  bytes_row("Active memory", s.active_bytes, s.peak_active_bytes);
  bytes_row("Reserved memory", s.reserved_bytes, s.peak_reserved_bytes);
  bytes_row("Inactive split memory", s.inactive_split_bytes, s.peak_inactive_split_bytes);
  rule('-');
  count_row("Allocations", s.num_allocs);
  count_row("Frees", s.num_frees);
  count_row("Cache hits", s.cache_hits);
  count_row("Cache misses", s.cache_misses);
  count_row("Segments", s.num_segments);
  count_row("OOMs", s.num_ooms);
  rule('-');
  row("Largest free block", format_bytes(s.largest_free_block), "");
  row("Fragmentation", format_percent(s.fragmentation), "");
  rule('-');
  full_width("Memory limit: " + (limit ? format_bytes(limit) : std::string("none")));
  rule('=');
  return out;
}

void CachingAllocator::set_memory_limit(int64_t bytes) {
  WEFT_CHECK(bytes >= 0, ValueError, "set_memory_limit: expected a byte count >= 0 (0 = no limit), got ",
             bytes);
  std::lock_guard lock(impl_->mutex);
  impl_->limit = bytes;
}

int64_t CachingAllocator::memory_limit() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->limit;
}

void CachingAllocator::enable_trace(bool on) {
  std::lock_guard lock(impl_->mutex);
  if (on) {
    impl_->trace.clear();
    impl_->next_seq = 0;
  }
  impl_->tracing = on;
}

std::string CachingAllocator::trace_json() const {
  std::lock_guard lock(impl_->mutex);
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& event : impl_->trace) {
    events.push_back({{"action", event.action},
                      {"addr", event.addr},
                      {"size", event.size},
                      {"what", event.what},
                      {"allocated_after", event.allocated_after},
                      {"reserved_after", event.reserved_after},
                      {"seq", event.seq}});
  }
  // `what` comes from callers and may hold invalid UTF-8, which must not make the dump throw.
  return events.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int64_t fresh_block_bytes(int64_t nbytes) {
  WEFT_CHECK(nbytes >= 0 && static_cast<size_t>(nbytes) <= kMaxRequest, ValueError, "fresh_block_bytes: ", nbytes,
             " bytes is not a request the allocator accepts");
  const size_t size = round_up(std::max(static_cast<size_t>(nbytes), size_t{1}), kMinBlockSize);
  if (size <= kSmallRequestMax) return static_cast<int64_t>(size);
  const size_t segment = round_up(size, kLargeSegmentRounding);
  return static_cast<int64_t>(segment - size > kSmallRequestMax ? size : segment);
}

// Units are case-insensitive and their trailing "B" optional, as in Kubernetes quantities:
// K, M, G, T are powers of 1000 and Ki, Mi, Gi, Ti powers of 1024.
int64_t parse_bytes(std::string_view text) {
  const auto fail = [&](const std::string& reason) {
    return ValueError(str("cannot read \"", text, "\" as a byte count (", reason,
                          "); expected a number with an optional unit, e.g. 123, 1e9, 1.5GB, 512MiB, 2GiB"));
  };
  const auto trim = [](std::string_view s) {
    const size_t first = s.find_first_not_of(" \t\n\r");
    if (first == std::string_view::npos) return std::string_view{};
    return s.substr(first, s.find_last_not_of(" \t\n\r") - first + 1);
  };
  const std::string_view number_and_unit = trim(text);
  if (number_and_unit.empty()) throw fail("it is empty");
  if (number_and_unit.front() == '-') throw fail("it is negative");

  double number = 0;
  const char* end = number_and_unit.data() + number_and_unit.size();
  const auto [unit_begin, error] = std::from_chars(number_and_unit.data(), end, number);
  if (error == std::errc::result_out_of_range) throw fail("the number is out of range");
  if (error != std::errc() || !std::isfinite(number)) throw fail("it does not start with a number");

  const std::string_view unit_text = trim(std::string_view(unit_begin, end));
  std::string unit(unit_text);
  std::ranges::transform(unit, unit.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (unit.ends_with('b')) unit.pop_back();
  double multiplier = 1;
  if (!unit.empty()) {
    constexpr std::string_view kPrefixes = "kmgt";
    const size_t prefix = kPrefixes.find(unit[0]);
    const bool binary = unit.size() == 2 && unit[1] == 'i';
    if (prefix == std::string_view::npos || (unit.size() > 1 && !binary)) {
      throw fail(str("unknown unit \"", unit_text, "\""));
    }
    multiplier = std::pow(binary ? 1024.0 : 1000.0, static_cast<double>(prefix + 1));
  }
  const double bytes = std::round(number * multiplier);
  if (!(bytes < 0x1p63)) throw fail("it exceeds the largest byte count, 2^63 - 1");
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) { return format_size(static_cast<double>(bytes)); }

}  // namespace weft
