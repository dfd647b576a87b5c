// Thread count for all of weft's CPU work: oneDNN (built on OpenMP in Debian) and weft's own
// OpenMP loops share one pool, so one setting governs both. Default: the number of cores
// (or OMP_NUM_THREADS when set).
#pragma once
#include <cstdint>

namespace weft {

void set_num_threads(int n);
int get_num_threads();

// Elementwise loops below this many elements run on one thread: forking costs more than it saves.
constexpr int64_t kParallelGrain = 32768;

}  // namespace weft
