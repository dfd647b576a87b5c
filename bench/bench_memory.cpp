// What each precision and memory technique costs and saves on one training step with AdamW: the
// allocator's peak during the step (parameters, gradients and optimizer state included) and the
// median step time, side by side. First weft train's CNN at batch 128, through the trainer's own
// step (train::accumulate_gradients); then a stack of transformer blocks, the kind of model
// activation checkpointing is for. Random inputs: the data changes neither figure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "weft/autograd/autocast_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/nn/models.h"
#include "weft/nn/transformer.h"
#include "weft/ops/loss.h"
#include "weft/optim/adam.h"
#include "weft/train/step.h"

using namespace weft;
using Clock = std::chrono::steady_clock;

namespace {

struct Mode {
  const char* name;
  int64_t grad_accum;
  bool checkpoint;
  std::optional<DType> low_precision;
};

struct Figures {
  int64_t peak_bytes;
  double step_ms;
};

// Runs `steps` optimizer steps of `step` (forward and backward) and returns the largest peak and
// the median time, leaving out the first steps (primitive creation, first optimizer state).
template <typename Step>
Figures measure(optim::Optimizer& optimizer, int steps, Step&& step) {
  std::vector<double> times;
  int64_t peak = 0;
  for (int i = 0; i < steps; ++i) {
    CachingAllocator::cpu().reset_peak_stats();
    auto start = Clock::now();
    optimizer.zero_grad();
    step();
    optimizer.step();
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    peak = std::max(peak, CachingAllocator::cpu().stats().peak_allocated_bytes);
  }
  times.erase(times.begin(), times.begin() + steps / 8);
  std::sort(times.begin(), times.end());
  return {peak, times[times.size() / 2]};
}

Figures measure_cnn(const Mode& mode, const data::Batch& batch) {
  manual_seed(0);
  auto model = nn::make_cnn();
  if (mode.checkpoint) model->set_checkpoint_segments(3);  // what --checkpoint-activations picks for 10 layers
  optim::AdamW optimizer(model->parameters());
  const int64_t micro_batch = batch.targets.numel() / mode.grad_accum;
  return measure(optimizer, 40, [&] {
    train::accumulate_gradients(*model, train::summed_cross_entropy, batch, micro_batch, mode.low_precision, nullptr);
  });
}

// GPT-2-small-shaped blocks (width 256, 4 heads, MLP 4x), context 256, batch 8: attention keeps a
// [8, 4, 256, 256] probability matrix per block, so activations dwarf the 0.8 M parameters per block.
Figures measure_transformer(int64_t blocks, bool checkpoint, std::optional<DType> low_precision) {
  manual_seed(0);
  nn::Sequential stack;
  for (int64_t i = 0; i < blocks; ++i) stack.push_back(std::make_shared<nn::TransformerBlock>(256, 4));
  if (checkpoint) stack.set_checkpoint_segments(blocks);  // one segment per block
  optim::AdamW optimizer(stack.parameters());
  Generator gen(2);
  Tensor x = Tensor::randn({8, 256, 256}, gen), target = Tensor::zeros({8, 256, 256});
  return measure(optimizer, 16, [&] {
    Tensor loss;
    {
      AutocastGuard autocast(low_precision);
      loss = mse_loss(stack(x), target);
    }
    loss.backward();
  });
}

void print_row(const char* name, const Figures& f, const Figures& base) {
  std::printf("%-34s %12s %7.0f%% %8.2fms %7.0f%%\n", name, format_bytes(f.peak_bytes).c_str(),
              100.0 * f.peak_bytes / base.peak_bytes, f.step_ms, 100.0 * f.step_ms / base.step_ms);
}

}  // namespace

int main() {
  set_num_threads(2);
  const int64_t n = 128;
  Generator gen(1);
  data::Batch batch{Tensor::randn({n, 1, 28, 28}, gen), Tensor::empty({n}, DType::i64)};
  for (int64_t i = 0; i < n; ++i) batch.targets.data<int64_t>()[i] = i % 10;

  const Mode modes[] = {
      {"fp32", 1, false, std::nullopt},
      {"fp32 --checkpoint-activations", 1, true, std::nullopt},
      {"fp32 --grad-accum 4", 4, false, std::nullopt},
      {"bf16 autocast", 1, false, DType::bf16},
      {"bf16 + checkpointing + accum 4", 4, true, DType::bf16},
  };
  std::printf("CNN training step (weft train --model cnn), batch %lld, AdamW, %d threads; peak = allocator peak "
              "during the step, median of 35 steps\n",
              static_cast<long long>(n), get_num_threads());
  std::printf("%-34s %12s %8s %10s %8s\n", "mode", "peak", "vs fp32", "step", "vs fp32");
  Figures base{};
  for (const Mode& mode : modes) {
    Figures f = measure_cnn(mode, batch);
    if (mode.grad_accum == 1 && !mode.checkpoint && !mode.low_precision) base = f;
    print_row(mode.name, f, base);
  }

  const int64_t blocks = 6;
  std::printf("\n%lld transformer blocks, width 256, 4 heads, context 256, batch 8, AdamW, mse loss; median of 14 "
              "steps\n",
              static_cast<long long>(blocks));
  std::printf("%-34s %12s %8s %10s %8s\n", "mode", "peak", "vs fp32", "step", "vs fp32");
  Figures plain = measure_transformer(blocks, false, std::nullopt);
  print_row("fp32", plain, plain);
  print_row("fp32, each block checkpointed", measure_transformer(blocks, true, std::nullopt), plain);
  print_row("bf16 autocast", measure_transformer(blocks, false, DType::bf16), plain);
  print_row("bf16, each block checkpointed", measure_transformer(blocks, true, DType::bf16), plain);
}
