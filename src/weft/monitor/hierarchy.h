// The machine's memory hierarchy, measured, for `weft bench hierarchy`: for working sets doubling
// from 4 KiB, the load-to-use latency of one thread chasing pointers around a random cycle (each
// load's address is the previous load's value, so loads cannot overlap and no prefetcher can guess
// the next line) and the bandwidth of one thread reading the working set in order. Where the
// latency steps up, the working set has outgrown a level: the plateaus between the steps are named
// L1, L2, L3 and RAM and set beside the cache sizes the operating system reports.
//
// Cycles are core clock cycles: the clock is timed on a chain of dependent additions, one cycle
// each, because the time-stamp counter ticks at a fixed rate (the "cpu MHz" of /proc/cpuinfo in a
// virtual machine) that need not be the rate the core runs at. On a machine that other processes
// share the figures are noisy; each is the best of several repeats, the one least disturbed.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace weft::monitor {

// A data or unified cache as the operating system reports it.
struct OsCache {
  int level = 0;
  std::string type;  // "Data" or "Unified"
  int64_t bytes = 0;
};

// cpu0's data and unified caches from `cache_dir` (in Linux's layout: index*/{level,type,size}),
// by level; instruction caches are left out. Empty when the directory is absent.
std::vector<OsCache> os_caches(const std::string& cache_dir = "/sys/devices/system/cpu/cpu0/cache");

// A random cyclic permutation of 0..n-1 by Sattolo's algorithm: following next[i] from any node
// visits all n nodes before returning to it. `n` >= 2.
std::vector<int64_t> random_cycle(int64_t n, uint64_t seed);

// The registers a program names, in bytes: 16 general-purpose of 8 bytes, and the vector
// registers of the widest instruction set this build targets (32 of 64 bytes with AVX-512).
int64_t register_file_bytes();

// The machine's physical memory (sysconf's pages times the page size).
int64_t physical_memory_bytes();

struct ClockRates {
  double core_hz = 0;  // timed on dependent additions
  double tsc_hz = 0;   // /proc/cpuinfo's "cpu MHz"; 0 when it says none
};
ClockRates clock_rates();

// One working set's figures.
struct HierarchyPoint {
  int64_t bytes = 0;
  double latency_ns = 0;
  double latency_cycles = 0;
  double read_gbps = 0;  // 1e9 bytes per second
};

struct HierarchyOptions {
  int64_t min_bytes = int64_t{4} << 10;
  int64_t max_bytes = int64_t{1} << 30;
  bool quick = false;  // fewer loads and repeats: rough figures, for tests
};

// Every working set from min_bytes to max_bytes, doubling. `core_hz` converts time to cycles;
// `measured`, when given, sees each point as soon as it is measured (a table printed as it goes).
std::vector<HierarchyPoint> measure_hierarchy(const HierarchyOptions& options, double core_hz,
                                              const std::function<void(const HierarchyPoint&)>& measured = {});

// A plateau of the latency curve, named.
struct HierarchyLevel {
  std::string name;            // "L1", "L2", "L3", "RAM"
  int64_t smallest_bytes = 0;  // the plateau's working sets, smallest to largest
  int64_t largest_bytes = 0;
  int64_t os_bytes = 0;    // the operating system's size for this cache level; 0 for RAM
  HierarchyPoint typical;  // the plateau's middle working set
};

// The plateaus of `points` (ascending working sets). A working set whose latency is more than
// `step` times the one before, or step² times the current plateau's lowest (a slow climb), starts
// a new plateau; a lone working set between two steps is part way through a transition and belongs
// to neither. The last plateau is RAM when its
// working sets outgrow the largest cache in `caches`; the others are L1, L2, ... in order. A cache
// level that the curve shows no plateau for (one shared with other tenants of the machine, say)
// has no level here, so the next plateau takes its number.
std::vector<HierarchyLevel> detect_levels(const std::vector<HierarchyPoint>& points, const std::vector<OsCache>& caches,
                                          double step = 1.4);

}  // namespace weft::monitor
