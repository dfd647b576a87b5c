// Thread count for all of weft's CPU work: oneDNN (built on OpenMP in Debian) and weft's own
// OpenMP loops share one pool, so one setting governs both. Default: the number of cores
// (or OMP_NUM_THREADS when set).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace weft {

void set_num_threads(int n);
int get_num_threads();

// Elementwise loops below this many elements run on one thread: forking costs more than it saves.
constexpr int64_t kParallelGrain = 32768;

// body(begin, end) over [0, n): one contiguous range per thread when `parallel`, otherwise a
// single call on this thread. Use it rather than `#pragma omp parallel for if (...)`: libgomp
// builds a team even for a region whose `if` is false, about 0.3 us, which is the whole cost of
// a small op (a Linear layer at batch 1 takes under a microsecond).
template <typename Body>
void parallel_for(int64_t n, bool parallel, Body&& body) {
  if (!parallel || n < 2 || get_num_threads() == 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t chunk = (n + threads - 1) / threads;
    const int64_t begin = std::min(n, id * chunk), end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

}  // namespace weft
