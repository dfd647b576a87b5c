// The caching allocator, on the host (the CPU's) or on a device's memory (kernels/cuda): the
// counterpart of PyTorch's CUDA caching allocator.
//
// Memory is reserved from its SegmentSource in segments (2 MiB for small requests, rounded-up large
// segments for big ones) and carved into 64-byte-aligned blocks. A freed block goes back to the
// allocator's cache, not to the system, so the next request of a similar size is a cache hit;
// blocks are split when a request is smaller than a cached block and merged with free
// neighbours of the same segment when freed. empty_cache() returns wholly free segments.
//
// Invariants: allocated_bytes <= reserved_bytes; every pointer handed out is 64-byte aligned and
// belongs to exactly one live block; peaks never decrease until reset_peak_stats().
//
// A memory limit (set_memory_limit, or the environment variable WEFT_MEMORY_LIMIT such as
// "2GiB", "512MiB", "1e9") emulates a device's capacity: when a request cannot be met within it,
// even after releasing the cache, allocate() throws OutOfMemoryError naming the request, the
// limit, allocated vs reserved bytes, the largest free block and the fragmentation.
// All methods are thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "weft/core/device.h"

namespace weft {

// PyTorch's statistic names: "allocated" = bytes in blocks handed out; "reserved" = bytes of
// segments held from the system; "active" = allocated here (no streams on the CPU);
// "inactive_split" = free bytes inside segments that also hold allocated blocks (the
// fragmentation that can make a request fail although enough bytes are free).
struct MemoryStats {
  int64_t allocated_bytes = 0, peak_allocated_bytes = 0;
  int64_t reserved_bytes = 0, peak_reserved_bytes = 0;
  int64_t active_bytes = 0, peak_active_bytes = 0;
  int64_t inactive_split_bytes = 0, peak_inactive_split_bytes = 0;
  int64_t num_allocs = 0, num_frees = 0;
  int64_t cache_hits = 0, cache_misses = 0;  // a miss reserves a new segment
  int64_t num_segments = 0, num_ooms = 0;
  int64_t largest_free_block = 0;
  double fragmentation = 0;  // 1 - largest_free_block / free bytes in the cache (0 when none free)
};

// Where an allocator's segments come from: the host's heap, or a device's memory (cudaMalloc).
// `reserve` returns null when the memory is not there (the allocator then releases its cache,
// tries once more and reports out of memory) and throws DeviceError when the device is not;
// `where` names the memory in messages ("the host", "cuda:0").
struct SegmentSource {
  void* (*reserve)(size_t nbytes);
  void (*release)(void* segment);
  const char* where;
};
SegmentSource host_segments();  // 64-byte-aligned blocks of the C heap

class CachingAllocator {
 public:
  static CachingAllocator& cpu();  // the process-wide CPU allocator

  explicit CachingAllocator(SegmentSource source = host_segments());
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // `what` describes the request for the OOM message and the trace (e.g. "tensor [128, 10] f32").
  // It is called only when one of those needs the text: formatting it costs more than serving a
  // cached block, and most requests need neither.
  using RequestText = std::function<std::string()>;
  void* allocate(size_t nbytes, const RequestText& what = {});
  void deallocate(void* ptr);

  // While on (process-wide), every allocate() and deallocate() of any CachingAllocator adds its
  // duration to a counter of the calling thread: a profiler reads it around a scope to report the
  // allocator's share of a step apart from the ops that called it. Off, a call pays one relaxed
  // load; on, two clock reads.
  static void time_calls(bool on);
  // This thread's nanoseconds in allocate() and deallocate() while timing was on (never reset).
  static int64_t thread_call_ns();

  MemoryStats stats() const;
  void reset_peak_stats();
  void empty_cache();
  std::string memory_summary() const;  // PyTorch-style table: current / peak / allocs / frees

  void set_memory_limit(int64_t bytes);  // 0 = no limit
  int64_t memory_limit() const;

  // Records alloc / free / segment / OOM events while enabled; trace_json() dumps them.
  void enable_trace(bool on);
  std::string trace_json() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The caching allocator of each device type (as c10's allocator registry): Storage takes a
// device's bytes from the one registered for its type. The CPU's is CachingAllocator::cpu() until
// another is registered for it; other types have none until a backend registers one.
// Register between steps: storage already allocated goes back to the allocator it came from.
CachingAllocator* allocator_for(Device::Type type);  // null when none is registered
// Makes `allocator` (null: none, the CPU's own for the CPU) serve `type`; returns the one it replaces.
CachingAllocator* register_allocator(Device::Type type, CachingAllocator* allocator);

// What a request of `nbytes` adds to allocated_bytes when it is served from a newly reserved
// segment: the size rounded up to 512 bytes, or, for a large request (> 1 MiB) whose 2 MiB-rounded
// segment would leave at most 1 MiB over, the whole segment (such a remainder is not split off).
// Memory planning counts tensors this way (src/weft/memory/); a request served from the cache may
// get a larger block by the same rule.
int64_t fresh_block_bytes(int64_t nbytes);

// "2GiB", "512MiB", "64KiB", "1.5GB", "1e9", "123" -> bytes; throws ValueError on nonsense.
int64_t parse_bytes(std::string_view text);
// 1536 -> "1.50 KiB"
std::string format_bytes(int64_t bytes);

}  // namespace weft
