#include "weft/memory/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "weft/kernels/cpu/matmul.h"
#include "weft/memory/estimate.h"
#include "weft/nn/linear.h"
#include "weft/nn/models.h"

namespace weft::memory {

namespace {

using Clock = std::chrono::steady_clock;

// The fastest of as many calls as fit in min_seconds (at least 5), after a warm-up call that pays the
// kernels' first-call setup: other processes on the machine only ever add time, so the fastest call is
// the machine's rate.
template <typename F>
double fastest_seconds(F&& call, double min_seconds) {
  call();
  std::vector<double> times;
  const Clock::time_point start = Clock::now();
  while (times.size() < 5 || std::chrono::duration<double>(Clock::now() - start).count() < min_seconds) {
    const Clock::time_point t0 = Clock::now();
    call();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return *std::min_element(times.begin(), times.end());
}

}  // namespace

std::vector<LinearShape> mlp_linears() {
  std::vector<LinearShape> shapes;
  const std::shared_ptr<nn::Sequential> mlp = nn::make_mlp();
  for (auto& [name, module] : mlp->named_modules())
    if (auto* linear = dynamic_cast<nn::Linear*>(module)) shapes.push_back({linear->in_features, linear->out_features});
  return shapes;
}

int64_t mlp_parameters() {
  int64_t n = 0;
  for (const LinearShape& l : mlp_linears()) n += l.in * l.out + l.out;
  return n;
}

double mlp_step_flops(int64_t batch) {
  const std::vector<LinearShape> layers = mlp_linears();
  double flops = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const double gemm = 2.0 * static_cast<double>(batch) * static_cast<double>(layers[i].in * layers[i].out);
    flops += (i == 0 ? 2 : 3) * gemm;
  }
  return flops;
}

GemmRate measure_square_gemm(int64_t size, double min_seconds) {
  const Tensor a = Tensor::randn({size, size}), b = Tensor::randn({size, size});
  GemmRate rate;
  rate.flops = 2.0 * static_cast<double>(size) * static_cast<double>(size) * static_cast<double>(size);
  rate.seconds = fastest_seconds([&] { cpu::matmul(a, b); }, min_seconds);
  return rate;
}

GemmRate measure_mlp_step_gemms(int64_t batch, double min_seconds) {
  struct Operands {
    Tensor x, weight, grad_out;
  };
  std::vector<Operands> layers;
  for (const LinearShape& l : mlp_linears())
    layers.push_back({Tensor::randn({batch, l.in}), Tensor::randn({l.out, l.in}), Tensor::randn({batch, l.out})});
  GemmRate rate;
  rate.flops = mlp_step_flops(batch);
  rate.seconds = fastest_seconds(
      [&] {
        for (size_t i = 0; i < layers.size(); ++i) {
          const Operands& o = layers[i];
          cpu::matmul(o.x, o.weight.t());                 // forward: x W^T
          cpu::matmul(o.grad_out.t(), o.x);               // the weights' gradient: g^T x
          if (i > 0) cpu::matmul(o.grad_out, o.weight);   // the inputs' gradient: g W
        }
      },
      min_seconds);
  return rate;
}

AllReduceMeasurement measure_allreduce(int64_t bytes, double min_seconds) {
  const size_t n = static_cast<size_t>(bytes) / sizeof(float), half = n / 2;
  std::vector<float> rank0(n, 1.0f), rank1(n, 2.0f), copy(n);
  AllReduceMeasurement m;
  m.bytes = static_cast<double>(n * sizeof(float));
  m.copy_bandwidth = m.bytes / fastest_seconds([&] { std::memcpy(copy.data(), rank0.data(), n * sizeof(float)); },
                                              min_seconds);
  m.measured_s = fastest_seconds(
      [&] {
        // Reduce-scatter: rank 0 owns the first half, rank 1 the second; each adds the other's part.
        for (size_t i = 0; i < half; ++i) rank0[i] += rank1[i];
        for (size_t i = half; i < n; ++i) rank1[i] += rank0[i];
        // All-gather: each copies the other's reduced half.
        std::memcpy(rank1.data(), rank0.data(), half * sizeof(float));
        std::memcpy(rank0.data() + half, rank1.data() + half, (n - half) * sizeof(float));
      },
      min_seconds);
  m.formula_s = ring_allreduce_seconds(m.bytes, 2, m.copy_bandwidth, 0);
  return m;
}

double mlp_step_seconds(const GemmRate& step_gemms, double copy_bandwidth) {
  return step_gemms.seconds + kAdamwBytesPerParam * static_cast<double>(mlp_parameters()) / (2 * copy_bandwidth);
}

}  // namespace weft::memory
