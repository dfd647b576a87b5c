// What calling a module through operator() (nn/module.h: forward pre-hooks, forward, forward
// hooks) costs over calling forward directly. First a module whose forward only returns its input,
// so the call is all there is to time: forward(), operator() with no hook, operator() with a no-op
// pre- and post-hook. Then weft train's default GPT (4 layers, width 128, batch 4 x 64 tokens,
// inference), forward with no hook and with a no-op pre- and post-hook on each of its 54 modules,
// as a profiler would register them. Each figure is the best of five runs.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/nn/gpt.h"

using namespace weft;
using Clock = std::chrono::steady_clock;

namespace {

class Identity : public nn::Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

template <typename Fn>
double best_seconds(int64_t reps, Fn&& fn) {
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < reps; ++i) fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

std::vector<RemovableHandle> no_op_hooks(nn::Module& module) {
  std::vector<RemovableHandle> handles;
  handles.push_back(module.register_forward_pre_hook([](nn::Module&, const Tensor&) { return std::nullopt; }));
  handles.push_back(
      module.register_forward_hook([](nn::Module&, const Tensor&, const Tensor&) { return std::nullopt; }));
  return handles;
}

}  // namespace

int main() {
  const int64_t reps = 10'000'000;
  Identity identity;
  nn::Module& module = identity;
  const Tensor x = Tensor::ones({4});
  const double direct = best_seconds(reps, [&] { benchmark::DoNotOptimize(module.forward(x)); });
  const double no_hooks = best_seconds(reps, [&] { benchmark::DoNotOptimize(module(x)); });
  std::vector<RemovableHandle> handles = no_op_hooks(module);
  const double with_hooks = best_seconds(reps, [&] { benchmark::DoNotOptimize(module(x)); });
  std::printf("module call, ns per call      forward()  operator() no hooks  operator() 2 no-op hooks\n");
  std::printf("  Identity                   %9.2f  %19.2f  %24.2f\n", direct / reps * 1e9, no_hooks / reps * 1e9,
              with_hooks / reps * 1e9);

  set_num_threads(1);
  manual_seed(0);
  nn::GPT model(nn::GPTConfig{});
  model.eval();
  NoGradGuard no_grad;
  std::vector<int64_t> ids(4 * 64);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 31 % 256);
  const Tensor tokens = Tensor::from_vector(ids, {4, 64});
  const int64_t forwards = 20;
  const double plain = best_seconds(forwards, [&] { benchmark::DoNotOptimize(model(tokens)); });
  std::vector<RemovableHandle> everywhere;
  for (auto& [name, m] : model.named_modules())
    for (RemovableHandle& h : no_op_hooks(*m)) everywhere.push_back(h);
  const double hooked = best_seconds(forwards, [&] { benchmark::DoNotOptimize(model(tokens)); });
  std::printf("GPT forward, ms (1 thread)   no hooks  2 no-op hooks on each of %zu modules\n",
              model.named_modules().size());
  std::printf("  4 x 64 tokens              %8.3f  %8.3f\n", plain / forwards * 1e3, hooked / forwards * 1e3);
}
