#include "weft/monitor/hierarchy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "weft/core/error.h"

namespace weft::monitor {

namespace {

constexpr int64_t kLineBytes = 64;  // one node per cache line, so every load touches a new line

// "48K" (sysfs' cache size) -> 49152.
int64_t sysfs_size_bytes(const std::string& text) {
  std::istringstream in(text);
  int64_t value = 0;
  std::string unit;
  in >> value >> unit;
  WEFT_CHECK(in.eof() || in.good(), FormatError, "cache size '", text, "' is not a number with K, M or G");
  if (unit.empty()) return value;
  WEFT_CHECK(unit == "K" || unit == "M" || unit == "G", FormatError, "cache size '", text,
             "' is not a number with K, M or G");
  return value << (unit == "K" ? 10 : unit == "M" ? 20 : 30);
}

std::string first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds for `chains` chains of 1000 dependent additions, which the compiler cannot fold. The
// addend is a register: recent cores (Intel's Golden Cove and later) fold additions of an immediate
// in the renamer, several a cycle, which would read as a clock five times too fast.
double time_dependent_adds(int64_t chains) {
  uint64_t x = 0;
  const uint64_t one = 1;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < chains; ++i) {
#if defined(__x86_64__)
    asm volatile(".rept 1000\n\taddq %1, %0\n\t.endr" : "+r"(x) : "r"(one));
#elif defined(__aarch64__)
    asm volatile(".rept 1000\n\tadd %0, %0, %1\n\t.endr" : "+r"(x) : "r"(one));
#else
#error "time_dependent_adds: no one-cycle dependent addition written for this architecture"
#endif
  }
  return seconds_since(start);
}

// Memory for the working sets: 2 MiB-aligned and, where the kernel allows, on huge pages, so that
// the curve steps where the caches end rather than where the TLB's reach ends.
struct PageBuffer {
  explicit PageBuffer(int64_t bytes) {
    constexpr int64_t huge = int64_t{2} << 20;
    const int64_t rounded = (bytes + huge - 1) / huge * huge;
    data = static_cast<char*>(std::aligned_alloc(huge, static_cast<size_t>(rounded)));
    WEFT_CHECK(data != nullptr, OutOfMemoryError, "weft bench hierarchy: cannot allocate ", bytes, " bytes");
    madvise(data, static_cast<size_t>(rounded), MADV_HUGEPAGE);
  }
  ~PageBuffer() { std::free(data); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  char* data = nullptr;
};

// Links the first `bytes` of `data` into one random cycle of line-sized nodes; returns its start.
void* link_cycle(char* data, int64_t bytes, uint64_t seed) {
  const int64_t nodes = bytes / kLineBytes;
  const std::vector<int64_t> next = random_cycle(nodes, seed);
  for (int64_t i = 0; i < nodes; ++i)
    *reinterpret_cast<void**>(data + i * kLineBytes) = data + next[static_cast<size_t>(i)] * kLineBytes;
  return data;
}

// Seconds per load, following the cycle from `p` for `loads` loads; `p` is left where they ended,
// so that the next repeat goes on to lines not yet visited rather than along the same path again,
// which the first would have brought into the caches.
double chase(void*& p, int64_t loads) {
  void* at = p;
  const auto begin = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < loads; i += 8) {
    at = *static_cast<void**>(at);
    at = *static_cast<void**>(at);
    at = *static_cast<void**>(at);
    at = *static_cast<void**>(at);
    at = *static_cast<void**>(at);
    at = *static_cast<void**>(at);
    at = *static_cast<void**>(at);
    at = *static_cast<void**>(at);
  }
  asm volatile("" : "+r"(at));  // the chain's end is used, so no load is dropped
  const double seconds = seconds_since(begin);
  p = at;
  return seconds / static_cast<double>(loads);
}

// Bytes per second reading the first `bytes` of `data` `passes` times, in 64-byte vectors with
// four sums in flight (the compiler picks the widest loads the target has: AVX-512 here).
double read_rate(const char* data, int64_t bytes, int64_t passes) {
  using Vec = uint64_t __attribute__((vector_size(64)));
  const Vec* v = reinterpret_cast<const Vec*>(data);
  const int64_t count = bytes / static_cast<int64_t>(sizeof(Vec));
  Vec a{}, b{}, c{}, d{};
  const auto begin = std::chrono::steady_clock::now();
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (int64_t i = 0; i < count; i += 4) {
      a += v[i];
      b += v[i + 1];
      c += v[i + 2];
      d += v[i + 3];
    }
    asm volatile("" : : "r"(&a), "r"(&b), "r"(&c), "r"(&d) : "memory");  // each pass really reads
  }
  const double seconds = seconds_since(begin);
  return static_cast<double>(bytes) * static_cast<double>(passes) / seconds;
}

}  // namespace

std::vector<OsCache> os_caches(const std::string& cache_dir) {
  std::vector<OsCache> caches;
  std::error_code missing;
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir, missing)) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    OsCache cache;
    cache.type = first_line(entry.path() / "type");
    if (cache.type != "Data" && cache.type != "Unified") continue;
    const std::string level = first_line(entry.path() / "level");
    WEFT_CHECK(
        !level.empty() && std::all_of(level.begin(), level.end(), [](unsigned char c) { return std::isdigit(c) != 0; }),
        FormatError, (entry.path() / "level").string(), ": not a cache level, got '", level, "'");
    cache.level = std::stoi(level);
    cache.bytes = sysfs_size_bytes(first_line(entry.path() / "size"));
    caches.push_back(cache);
  }
  std::sort(caches.begin(), caches.end(), [](const OsCache& a, const OsCache& b) { return a.level < b.level; });
  return caches;
}

std::vector<int64_t> random_cycle(int64_t n, uint64_t seed) {
  WEFT_CHECK(n >= 2, ValueError, "random_cycle: needs at least 2 nodes, got ", n);
  std::vector<int64_t> next(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) next[static_cast<size_t>(i)] = i;
  // Sattolo: swapping each slot only with an earlier one, never with itself, turns the identity
  // into a permutation of one cycle through all n (Fisher-Yates, which may keep a slot, would give
  // a random permutation, usually of several cycles).
  std::mt19937_64 random(seed);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(next[static_cast<size_t>(i)],
              next[static_cast<size_t>(std::uniform_int_distribution<int64_t>(0, i - 1)(random))]);
  return next;
}

int64_t register_file_bytes() {
  constexpr int64_t general = 16 * 8;
#if defined(__AVX512F__)
  return general + 32 * 64;
#elif defined(__AVX__)
  return general + 16 * 32;
#else
  return general + 16 * 16;
#endif
}

int64_t physical_memory_bytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

ClockRates clock_rates() {
  ClockRates rates;
  constexpr int64_t chains = 1000;  // a million cycles, a fraction of a millisecond
  double best = time_dependent_adds(chains);
  for (int repeat = 0; repeat < 30; ++repeat) best = std::min(best, time_dependent_adds(chains));
  rates.core_hz = static_cast<double>(chains) * 1000 / best;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    rates.tsc_hz = std::strtod(line.substr(line.find(':') + 1).c_str(), nullptr) * 1e6;
    break;
  }
  return rates;
}

std::vector<HierarchyPoint> measure_hierarchy(const HierarchyOptions& options, double core_hz,
                                              const std::function<void(const HierarchyPoint&)>& measured) {
  WEFT_CHECK(options.min_bytes >= 4096 && options.max_bytes >= options.min_bytes, ValueError,
             "measure_hierarchy: working sets from ", options.min_bytes, " to ", options.max_bytes,
             " bytes; the smallest is 4 KiB");
  // Enough loads that the slowest (RAM, ~100 ns) take a fifth of a second, and enough bytes read
  // that the fastest reads take milliseconds; the best of the repeats is kept.
  const int64_t loads = options.quick ? int64_t{1} << 14 : int64_t{1} << 21;
  const int64_t read_bytes = options.quick ? int64_t{1} << 20 : int64_t{256} << 20;
  const int repeats = options.quick ? 2 : 3;
  PageBuffer buffer(options.max_bytes);
  std::vector<HierarchyPoint> points;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    void* at = link_cycle(buffer.data, bytes, static_cast<uint64_t>(bytes));
    HierarchyPoint point;
    point.bytes = bytes;
    double seconds_per_load = chase(at, loads);
    for (int r = 1; r < repeats; ++r) seconds_per_load = std::min(seconds_per_load, chase(at, loads));
    const int64_t passes = std::max<int64_t>(1, read_bytes / bytes);
    double bytes_per_second = read_rate(buffer.data, bytes, passes);
    for (int r = 1; r < repeats; ++r)
      bytes_per_second = std::max(bytes_per_second, read_rate(buffer.data, bytes, passes));
    point.latency_ns = seconds_per_load * 1e9;
    point.latency_cycles = seconds_per_load * core_hz;
    point.read_gbps = bytes_per_second / 1e9;
    points.push_back(point);
    if (measured) measured(point);
    if (bytes > options.max_bytes / 2) break;
  }
  return points;
}

std::vector<HierarchyLevel> detect_levels(const std::vector<HierarchyPoint>& points, const std::vector<OsCache>& caches,
                                          double step) {
  std::vector<std::vector<size_t>> plateaus;
  double lowest = 0;  // the current plateau's lowest latency
  for (size_t i = 0; i < points.size(); ++i) {
    const double latency = points[i].latency_ns;
    if (!plateaus.empty() && latency <= points[i - 1].latency_ns * step && latency <= lowest * step * step) {
      plateaus.back().push_back(i);
      lowest = std::min(lowest, latency);
      continue;
    }
    // A step up. A plateau of one working set that a step both began and ended was a transition.
    if (plateaus.size() >= 2 && plateaus.back().size() == 1) plateaus.pop_back();
    plateaus.push_back({i});
    lowest = latency;
  }
  const int64_t largest_cache = caches.empty() ? 0 : caches.back().bytes;
  std::vector<HierarchyLevel> levels;
  for (size_t k = 0; k < plateaus.size(); ++k) {
    const std::vector<size_t>& plateau = plateaus[k];
    HierarchyLevel level;
    level.smallest_bytes = points[plateau.front()].bytes;
    level.largest_bytes = points[plateau.back()].bytes;
    level.typical = points[plateau[plateau.size() / 2]];
    const int number = static_cast<int>(k) + 1;
    if (k > 0 && k + 1 == plateaus.size() && !caches.empty() && level.largest_bytes > largest_cache) {
      level.name = "RAM";
    } else {
      level.name = "L" + std::to_string(number);
      for (const OsCache& cache : caches)
        if (cache.level == number) level.os_bytes = cache.bytes;
    }
    levels.push_back(level);
  }
  return levels;
}

}  // namespace weft::monitor
