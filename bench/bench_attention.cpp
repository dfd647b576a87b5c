// Causal self-attention, the composed op (matmul + mask + softmax + matmul, which builds and keeps
// the [B, H, T, T] scores and probabilities) beside the fused kernel (online softmax, keeps the
// output and one log-sum-exp per row), in one run: median forward time and forward + backward
// time, the bytes each keeps between forward and backward, and the allocator's peak over a
// forward + backward step, both beyond the inputs. f32. With no arguments: B = 8, H = 4, D = 64 at
// T = 64, 256, 1024, then the GPT shapes (the speed benchmark's T = 64 at D = 64 and 32, the
// learning run's B = 16..32, H = 4..8, T = 128..256). bench_attention B H D runs that B, H, D at
// T = 64, 256, 1024.
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

struct Config {
  int64_t B, H, T, D;
};

void run(const Config& c) {
  const int reps = c.T >= 1024 ? 3 : 10;
  const Figures composed = measure(scaled_dot_product_attention_composed, c.B, c.H, c.T, c.D, reps);
  const Figures fused = measure(scaled_dot_product_attention, c.B, c.H, c.T, c.D, reps);
  for (auto [name, f] : {std::pair{"composed", composed}, std::pair{"fused", fused}})
    std::printf("%4lld %3lld %5lld %4lld  %-9s %11.3f %13.3f %11.2f %11.2f\n", static_cast<long long>(c.B),
                static_cast<long long>(c.H), static_cast<long long>(c.T), static_cast<long long>(c.D), name,
                f.forward_ms, f.step_ms, mib(f.kept_bytes), mib(f.peak_bytes));
  std::printf("%4s %3s %5s %4s  %-9s %11s %13s %11s %11s   %.2fx %.2fx %.3fx %.3fx\n", "", "", "", "", "", "", "", "",
              "", fused.forward_ms / composed.forward_ms, fused.step_ms / composed.step_ms,
              static_cast<double>(fused.kept_bytes) / static_cast<double>(composed.kept_bytes),
              static_cast<double>(fused.peak_bytes) / static_cast<double>(composed.peak_bytes));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Config> configs;
  if (argc > 1) {
    const int64_t B = std::atoll(argv[1]), H = argc > 2 ? std::atoll(argv[2]) : 4,
                  D = argc > 3 ? std::atoll(argv[3]) : 64;
    for (int64_t T : {64, 256, 1024}) configs.push_back({B, H, T, D});
  } else {
    configs = {{8, 4, 64, 64},  {8, 4, 256, 64},  {8, 4, 1024, 64}, {8, 4, 64, 32},
               {16, 8, 128, 32}, {32, 4, 128, 64}, {16, 8, 256, 32}, {16, 4, 256, 64}};
  }
  std::printf("causal attention, f32, %d threads; times are medians, bytes are beyond q, k, v\n", get_num_threads());
  std::printf("%4s %3s %5s %4s  %-9s %11s %13s %11s %11s   %s\n", "B", "H", "T", "D", "op", "forward ms", "fwd+bwd ms",
              "kept MiB", "peak MiB", "fused/composed (fwd, fwd+bwd, kept, peak)");
  for (const Config& c : configs) run(c);
}
