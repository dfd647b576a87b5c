#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/threads.h"

namespace weft {
namespace {

// oneDNN (OpenMP runtime) sizes its parallel regions from omp_get_max_threads(), so checking
// what an OpenMP region sees checks what oneDNN will use too.
TEST(Threads, SetNumThreadsGovernsParallelRegions) {
  int before = get_num_threads();
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    EXPECT_EQ(get_num_threads(), n);
    int seen = 0;
#pragma omp parallel
    {
#pragma omp single
      seen = omp_get_num_threads();
    }
    EXPECT_EQ(seen, n);
  }
  set_num_threads(before);
}

// Every index exactly once, in ranges that tile [0, n); on this thread alone unless asked.
TEST(Threads, ParallelForCoversEveryIndexOnce) {
  const int before = get_num_threads();
  for (int threads : {1, 3})
    for (bool parallel : {false, true})
      for (int64_t n : {0, 1, 2, 5, 1000}) {
        set_num_threads(threads);
        std::vector<int> hits(n, 0);
        std::vector<int> calls_by_thread(threads, 0);
        parallel_for(n, parallel, [&](int64_t begin, int64_t end) {
          EXPECT_LT(begin, end);
          for (int64_t i = begin; i < end; ++i) ++hits[i];
#pragma omp atomic
          ++calls_by_thread[omp_get_thread_num()];
        });
        EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), n) << threads << " threads, n = " << n;
        const int calls = std::accumulate(calls_by_thread.begin(), calls_by_thread.end(), 0);
        if (!parallel || threads == 1 || n < 2) EXPECT_EQ(calls, n > 0 ? 1 : 0);
        else EXPECT_EQ(calls, std::min<int64_t>(n, threads));
      }
  set_num_threads(before);
}

TEST(Threads, RejectsNonPositiveCounts) {
  EXPECT_THROW(set_num_threads(0), ValueError);
  EXPECT_THROW(set_num_threads(-2), ValueError);
}

}  // namespace
}  // namespace weft
