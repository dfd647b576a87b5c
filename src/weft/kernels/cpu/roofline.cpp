#include "weft/kernels/cpu/roofline.h"

#include <algorithm>
#include <chrono>

#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/matmul.h"
#include "weft/kernels/cpu/onednn.h"

namespace weft::cpu {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The best rate over `reps` runs of `work`, after one untimed run (oneDNN builds its primitive,
// pages are touched).
template <typename Work>
double best_rate(double units_per_run, int reps, Work work) {
  work();
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    work();
    best = std::max(best, units_per_run / seconds_since(start));
  }
  return best;
}

double gemm_gflops(DType dtype) {
  constexpr int64_t n = 1024;
  Generator gen(0);
  // copy_ converts without autograd, which kernels stay below.
  Tensor a = Tensor::empty({n, n}, dtype), b = Tensor::empty({n, n}, dtype);
  a.copy_(Tensor::randn({n, n}, gen));
  b.copy_(Tensor::randn({n, n}, gen));
  return best_rate(2.0 * n * n * n / 1e9, 8, [&] { matmul(a, b); });
}

double triad_gbs() {
  constexpr int64_t n = 16 << 20;  // 64 MiB of f32 per array: far beyond any cache
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  float* pa = a.data();
  const float *pb = b.data(), *pc = c.data();
  const float s = 0.5f;
  return best_rate(3.0 * n * sizeof(float) / 1e9, 8, [&] {
#pragma omp parallel for simd if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
  });
}

}  // namespace

RooflineFigures measure_roofline() {
  RooflineFigures f;
  f.f32_gflops = gemm_gflops(DType::f32);
  if (onednn::bf16_support() == onednn::Bf16Support::native) f.bf16_gflops = gemm_gflops(DType::bf16);
  f.bandwidth_gbs = triad_gbs();
  return f;
}

monitor::Roofline roofline_for(const RooflineFigures& figures, DType compute_dtype) {
  const bool bf16 = (compute_dtype == DType::bf16 || compute_dtype == DType::f16) && figures.bf16_gflops > 0;
  return {bf16 ? figures.bf16_gflops : figures.f32_gflops, figures.bandwidth_gbs};
}

}  // namespace weft::cpu
