#include <gtest/gtest.h>
#include <omp.h>

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

TEST(Threads, RejectsNonPositiveCounts) {
  EXPECT_THROW(set_num_threads(0), ValueError);
  EXPECT_THROW(set_num_threads(-2), ValueError);
}

}  // namespace
}  // namespace weft
