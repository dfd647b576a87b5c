// Decoding with weight-only int8 and int4 projections beside f32, in one run: tokens per second
// of cached decode steps at batch 1 and 8 for a GPT of GPT-2 small's blocks (12 layers, width
// 768, 12 heads) with the byte vocabulary, so that the projections are nearly all of the bytes a
// step reads (85M weights: 340 MB in f32, 89 MB in int8, 53 MB in int4). Decoding reads every
// weight once per step whatever the batch, so at batch 1 the step time follows the bytes.
// Seeded random weights; each figure is the best of three runs of `steps` steps after a prefill.
// bench_weight_only [steps] (default 32).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/nn/gpt.h"
#include "weft/quant/ptq.h"

using namespace weft;
using Clock = std::chrono::steady_clock;

namespace {

const nn::GPTConfig kConfig{.layers = 12, .heads = 12, .dim = 768, .context = 128, .vocab = 256};

int64_t model_bytes(nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& [name, t] : model.state_dict()) bytes += t.nbytes();
  return bytes;
}

// Seconds per decode step of `batch` sequences, best of three runs of `steps` steps.
double seconds_per_step(nn::GPT& model, int64_t batch, int64_t steps) {
  NoGradGuard no_grad;
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    nn::KVCache cache = model.make_kv_cache(batch);
    model(Tensor::zeros({batch, 8}, DType::i64), cache);  // the prompt
    Tensor token = Tensor::zeros({batch, 1}, DType::i64);
    const Clock::time_point start = Clock::now();
    for (int64_t s = 0; s < steps; ++s) model(token, cache);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(steps);
    if (run == 0 || seconds < best) best = seconds;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 32;
  std::printf("GPT (12 layers, width 768, 12 heads, byte vocabulary), %d threads, %lld cached decode steps\n",
              get_num_threads(), static_cast<long long>(steps));
  std::printf("  %-6s %12s %14s %14s %10s\n", "format", "model bytes", "batch 1 tok/s", "batch 8 tok/s", "vs f32");
  double f32_step = 0;
  for (int bits : {32, 8, 4}) {
    manual_seed(0);
    nn::GPT model(kConfig);
    model.eval();
    if (bits != 32) quant::quantize_linear_weights(model, bits);
    const double one = seconds_per_step(model, 1, steps), eight = seconds_per_step(model, 8, steps);
    if (bits == 32) f32_step = one;
    std::printf("  %-6s %12lld %14.1f %14.1f %9.2fx\n", bits == 32 ? "f32" : bits == 8 ? "int8" : "int4",
                static_cast<long long>(model_bytes(model)), 1.0 / one, 8.0 / eight, f32_step / one);
  }
  return 0;
}
