// What the op seam costs: the same tiny ops with no observer attached and with the profiler
// recording, side by side, and an op scope alone. With none attached a scope is one atomic load
// and a branch, so the first column is what the ops cost without any seam; the second is what
// profiling adds per op (two clock reads, the event, an allocator sample). Best of several runs.
// Then three profiled CNN training steps (batch 64) with phase and module scopes, as the trainer
// opens them: the key-averages table against this machine's measured roofline, and with a path
// argument (bench_profiler trace.json) their Chrome trace for Perfetto.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/roofline.h"
#include "weft/monitor/profiler.h"
#include "weft/nn/models.h"
#include "weft/ops/arith.h"
#include "weft/ops/linear.h"
#include "weft/ops/loss.h"
#include "weft/optim/adam.h"

using namespace weft;

namespace {

// Best ns per call of `fn` over `reps` runs of `calls` calls, the profiler recording when `profile`
// (a fresh one per run, so its event list stays small).
double ns_per_call(const std::function<void()>& fn, int64_t calls, bool profile, int reps = 7) {
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {
    monitor::Profiler profiler;
    if (profile) profiler.start();
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < calls; ++i) fn();
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    if (profile) profiler.stop();
    if (r > 0) best = std::min(best, ns / static_cast<double>(calls));
  }
  return best;
}

void row(const char* what, double none_ns, double profiled_ns) {
  std::printf("%-40s %14.1f %14.1f %+9.1f\n", what, none_ns, profiled_ns, profiled_ns - none_ns);
}

}  // namespace

int main(int argc, char** argv) {
  std::printf("threads %d\n", get_num_threads());
  std::printf("%-40s %14s %14s %9s\n", "ns per call", "no observer", "profiling", "added");
  Generator gen(0);
  const Tensor a16 = Tensor::randn({16}, gen), b16 = Tensor::randn({16}, gen);
  const Tensor a64 = Tensor::randn({64, 64}, gen), b64 = Tensor::randn({64, 64}, gen);
  volatile bool sink = false;
  auto scope_alone = [&] {
    monitor::OpScope scope(Op::add, {a16, b16});
    sink = scope.active();
  };
  row("op scope alone", ns_per_call(scope_alone, 2'000'000, false), ns_per_call(scope_alone, 20'000, true));
  auto add16 = [&] { add(a16, b16); };
  row("add [16] + [16]", ns_per_call(add16, 200'000, false), ns_per_call(add16, 20'000, true));
  auto mm64 = [&] { matmul(a64, b64); };
  row("matmul [64, 64] @ [64, 64]", ns_per_call(mm64, 20'000, false), ns_per_call(mm64, 20'000, true));

  // A whole training step of the MLP (batch 64): about 40 scopes, forward, backward, optimizer.
  auto model = nn::make_mlp();
  optim::AdamW optimizer(model->parameters());
  const Tensor x = Tensor::randn({64, 1, 28, 28}, gen);
  std::vector<double> labels(64);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<double>(i % 10);
  const Tensor y = Tensor::from_vector(labels, {64}, DType::i64);
  auto train_step = [&] {
    cross_entropy((*model)(x), y).backward();
    optimizer.step();
    optimizer.zero_grad();
  };
  const double none_ns = ns_per_call(train_step, 20, false), profiled_ns = ns_per_call(train_step, 20, true);
  std::printf("%-40s %14.1f %14.1f %+8.2f%%\n", "MLP train step, batch 64 (us)", none_ns / 1e3, profiled_ns / 1e3,
              100 * (profiled_ns / none_ns - 1));


  // The CNN's children run between begin_module / end_module, as module hooks will call them.
  auto cnn = nn::make_cnn();
  optim::AdamW cnn_optimizer(cnn->parameters());
  const Tensor images = Tensor::randn({64, 1, 28, 28}, gen);
  auto cnn_step = [&] {
    monitor::PhaseScope step("step");
    Tensor loss;
    {
      monitor::PhaseScope phase("forward");
      Tensor h = images;
      for (const auto& [name, child] : cnn->named_children()) {
        monitor::begin_module(name + " " + child->name());
        h = (*child)(h);
        monitor::end_module();
      }
      loss = cross_entropy(h, y);
    }
    {
      monitor::PhaseScope phase("backward");
      loss.backward();
    }
    monitor::PhaseScope phase("optimizer");
    cnn_optimizer.step();
    cnn_optimizer.zero_grad();
  };
  cnn_step();
  monitor::Profiler profiler;
  profiler.start();
  for (int i = 0; i < 3; ++i) cnn_step();
  profiler.stop();
  // The ceilings the profiler's table judges ops against, as the trainer measures them.
  const cpu::RooflineFigures roof = cpu::measure_roofline();
  std::printf("\nroofline: f32 GEMM %.1f GFLOP/s, bf16 GEMM %.1f GFLOP/s (0: no native bf16), triad %.1f GB/s\n",
              roof.f32_gflops, roof.bf16_gflops, roof.bandwidth_gbs);
  const monitor::Roofline roofline = cpu::roofline_for(roof);
  std::printf("CNN, 3 profiled training steps of batch 64: %.1f ms\n%s", profiler.step_ms(),
              monitor::Profiler::table(profiler.key_averages(roofline), roofline, 15).c_str());
  if (argc > 1) {
    profiler.write_trace(argv[1]);
    std::printf("trace: %s\n", argv[1]);
  }
  return sink ? 0 : 0;
}
