// Causal self-attention, the composed op (matmul + mask + softmax + matmul, which builds and keeps
// the [B, H, T, T] scores and probabilities) beside the fused kernel (online softmax, keeps the
// output and one log-sum-exp per row), in one run: median forward time and forward + backward
// time, the bytes each keeps between forward and backward, and the allocator's peak over a
// forward + backward step, both beyond the inputs. f32, B = 8, H = 4, D = 64 unless told
// otherwise: bench_attention [B H D].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/ops/attention.h"

using namespace weft;
using Clock = std::chrono::steady_clock;

namespace {

using Attention = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, bool, double);

struct Figures {
  double forward_ms = 0, step_ms = 0;
  int64_t kept_bytes = 0, peak_bytes = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double since_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

Figures measure(Attention attention, int64_t B, int64_t H, int64_t T, int64_t D, int reps) {
  Generator gen(0);
  Tensor q = Tensor::randn({B, H, T, D}, gen), k = Tensor::randn({B, H, T, D}, gen),
         v = Tensor::randn({B, H, T, D}, gen), grad = Tensor::randn({B, H, T, D}, gen);
  for (Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
  CachingAllocator& allocator = CachingAllocator::cpu();
  Figures f;
  std::vector<double> forward, step;
  for (int r = 0; r < reps + 1; ++r) {  // the first run creates oneDNN primitives: not timed
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    const int64_t before = allocator.stats().allocated_bytes;
    allocator.reset_peak_stats();
    auto start = Clock::now();
    Tensor out = attention(q, k, v, true, 0);
    const double forward_ms = since_ms(start);
    const int64_t kept = allocator.stats().allocated_bytes - before;
    out.backward(grad);
    const double step_ms = since_ms(start);
    if (r == 0) continue;
    forward.push_back(forward_ms);
    step.push_back(step_ms);
    f.kept_bytes = kept;
    f.peak_bytes = std::max(f.peak_bytes, allocator.stats().peak_allocated_bytes - before);
  }
  f.forward_ms = median(forward);
  f.step_ms = median(step);
  return f;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  const int64_t B = argc > 1 ? std::atoll(argv[1]) : 8, H = argc > 2 ? std::atoll(argv[2]) : 4,
                D = argc > 3 ? std::atoll(argv[3]) : 64;
  std::printf("causal attention, f32, B=%lld H=%lld D=%lld, %d threads; times are medians, bytes are beyond q, k, v\n",
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(D), get_num_threads());
  std::printf("%6s  %-9s %11s %13s %11s %11s   %s\n", "T", "op", "forward ms", "fwd+bwd ms", "kept MiB",
              "peak MiB", "fused/composed (fwd, fwd+bwd, kept, peak)");
  for (int64_t T : {64, 256, 1024}) {
    const int reps = T >= 1024 ? 3 : 10;
    const Figures composed = measure(scaled_dot_product_attention_composed, B, H, T, D, reps);
    const Figures fused = measure(scaled_dot_product_attention, B, H, T, D, reps);
    for (auto [name, f] : {std::pair{"composed", composed}, std::pair{"fused", fused}})
      std::printf("%6lld  %-9s %11.2f %13.2f %11.2f %11.2f\n", static_cast<long long>(T), name, f.forward_ms, f.step_ms,
                  mib(f.kept_bytes), mib(f.peak_bytes));
    std::printf("%6s  %-9s %11s %13s %11s %11s   %.2fx %.2fx %.3fx %.3fx\n", "", "", "", "", "", "",
                fused.forward_ms / composed.forward_ms, fused.step_ms / composed.step_ms,
                static_cast<double>(fused.kept_bytes) / static_cast<double>(composed.kept_bytes),
                static_cast<double>(fused.peak_bytes) / static_cast<double>(composed.peak_bytes));
  }
}
