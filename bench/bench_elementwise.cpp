// Elementwise bandwidth beside memcpy: what a memory-bound op can reach, and what layout costs.
// Bytes moved count every read and write once (add: 2 reads + 1 write per element).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "weft/core/threads.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"

using namespace weft;

static double best_seconds(const std::function<void()>& fn, int reps = 15) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int main() {
  set_num_threads(2);
  const int64_t rows = 4096, cols = 4096;  // 64 MiB per f32 tensor: far beyond the caches
  const double n = static_cast<double>(rows * cols);
  Tensor a = Tensor::rand({rows, cols}), b = Tensor::rand({rows, cols}) ;
  Tensor at = Tensor::rand({cols, rows}).t(), bt = Tensor::rand({cols, rows}).t();  // same shape, transposed layout
  Tensor at_bf16 = at.to(DType::bf16).t().contiguous().t(), at_i8 = Tensor::zeros({cols, rows}, DType::i8).t();
  Tensor at_f64 = at.to(DType::f64).t().contiguous().t();
  std::vector<float> src(rows * cols, 1.0f), dst(rows * cols, 0.0f);

  double memcpy_s = best_seconds([&] {
#pragma omp parallel
    {
      int threads = omp_get_num_threads(), id = omp_get_thread_num();
      size_t chunk = (src.size() + threads - 1) / threads, begin = std::min(src.size(), id * chunk);
      size_t len = std::min(chunk, src.size() - begin);
      std::memcpy(dst.data() + begin, src.data() + begin, len * sizeof(float));
    }
  });
  double memcpy_gbs = 2 * n * 4 / memcpy_s / 1e9;
  struct Row { const char* name; double bytes; std::function<void()> fn; };
  std::vector<Row> cases = {
      {"add (contiguous)", 3 * n * 4, [&] { Tensor c = add(a, b); }},
      {"relu (contiguous)", 2 * n * 4, [&] { Tensor c = relu(a); }},
      {"add (transposed views)", 3 * n * 4, [&] { Tensor c = add(at, bt); }},
      {"relu (transposed view)", 2 * n * 4, [&] { Tensor c = relu(at); }},
      {"contiguous() of a transposed view", 2 * n * 4, [&] { Tensor c = at.contiguous(); }},
      {"  the same, bf16", 2 * n * 2, [&] { Tensor c = at_bf16.contiguous(); }},
      {"  the same, i8", 2 * n * 1, [&] { Tensor c = at_i8.contiguous(); }},
      {"  the same, f64", 2 * n * 8, [&] { Tensor c = at_f64.contiguous(); }},
  };
  std::printf("elementwise f32, %lld x %lld, %d threads\n", static_cast<long long>(rows),
              static_cast<long long>(cols), get_num_threads());
  std::printf("%-36s %10s %10s\n", "op", "GB/s", "% memcpy");
  std::printf("%-36s %10.1f %9.0f%%\n", "memcpy (2 threads)", memcpy_gbs, 100.0);
  for (auto& c : cases) {
    double gbs = c.bytes / best_seconds(c.fn) / 1e9;
    std::printf("%-36s %10.1f %9.0f%%\n", c.name, gbs, 100 * gbs / memcpy_gbs);
  }
  std::printf("targets: contiguous elementwise >= 70%% of memcpy; contiguous() of a transposed view >= 50%%\n");
}
