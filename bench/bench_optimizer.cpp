// weft's side of bench/optimizer_vs_pytorch.py: ms per optimizer step on the given parameter
// shapes (f32, random grads), printed as one JSON line. Each figure is the best of STEPS timed
// calls after two untimed ones (other work on a shared machine only ever adds time).
//
//   build/bench/bench_optimizer 50304x768 64x768 768 ...        (shapes as DIMxDIM..., one per parameter)
//
// Without shapes (as make bench runs every bench_*), the MLP's: 784-512-256-10.
//
// Rows: AdamW (betas 0.9 / 0.95, weight decay 0.1, as bench/gpt_vs_pytorch.py trains), SGD with
// momentum 0.9, clip_grad_norm to norm 1 (norm and in-place scaling; the grads restored, untimed,
// before each call), grad_norm alone (what the
// trainer reads, its scaling folded into the update), and AdamW's step with a clipping factor.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/optim/adam.h"
#include "weft/optim/clip.h"
#include "weft/optim/sgd.h"

using namespace weft;

// `before` runs untimed ahead of every call.
static double best_ms(const std::function<void()>& fn, int steps, const std::function<void()>& before = [] {}) {
  before();
  fn();
  before();
  fn();
  std::vector<double> ms;
  for (int r = 0; r < steps; ++r) {
    before();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return *std::min_element(ms.begin(), ms.end());
}

static void restore_grad(const Tensor& p, const Tensor& from) {
  Tensor g = p.grad();
  g.copy_(from);
}

static Shape parse_shape(const std::string& text) {
  Shape shape;
  for (size_t start = 0;;) {
    const size_t x = text.find('x', start);
    shape.push_back(std::stoll(text.substr(start, x - start)));
    if (x == std::string::npos) return shape;
    start = x + 1;
  }
}

int main(int argc, char** argv) {
  const char* steps_env = std::getenv("STEPS");
  const int steps = steps_env ? std::atoi(steps_env) : 10;
  set_num_threads(2);
  Generator gen(0);
  std::vector<Tensor> params;
  int64_t numel = 0;
  std::vector<std::string> shapes(argv + 1, argv + argc);
  if (shapes.empty()) shapes = {"512x784", "512", "256x512", "256", "10x256", "10"};
  for (const std::string& shape : shapes) {
    Tensor p = Tensor::randn(parse_shape(shape), gen).requires_grad_(true);
    p.set_grad(Tensor::randn(p.shape(), gen));
    numel += p.numel();
    params.push_back(p);
  }
  double adamw_ms = 0, adamw_factor_ms = 0;
  {
    optim::AdamW adamw(params, {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1});
    adamw_ms = best_ms([&] { adamw.step(); }, steps);
    adamw_factor_ms = best_ms([&] { adamw.step(0.5); }, steps);
  }
  double sgd_ms = 0;
  {
    optim::SGD sgd(params, 1e-4, {.momentum = 0.9});
    sgd_ms = best_ms([&] { sgd.step(); }, steps);
  }
  const double norm_ms = best_ms([&] { optim::grad_norm(params); }, steps);
  // Every call must scale: the grads are restored before each (at norm 1 after one clip, a second
  // clip to 1 would only read them).
  std::vector<Tensor> saved;
  for (const Tensor& p : params) saved.push_back(p.grad().clone());
  const double clip_ms = best_ms([&] { optim::clip_grad_norm(params, 1.0); }, steps, [&] {
    for (size_t i = 0; i < params.size(); ++i) restore_grad(params[i], saved[i]);
  });
  std::printf("{\"params\": %lld, \"adamw_ms\": %.3f, \"adamw_with_factor_ms\": %.3f, \"sgd_momentum_ms\": %.3f, "
              "\"clip_grad_norm_ms\": %.3f, \"grad_norm_ms\": %.3f}\n",
              static_cast<long long>(numel), adamw_ms, adamw_factor_ms, sgd_ms, clip_ms, norm_ms);
}
