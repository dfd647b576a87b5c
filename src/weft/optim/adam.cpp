#include "weft/optim/adam.h"

#include <cmath>

#include "weft/core/threads.h"
#include "weft/monitor/profiler.h"

namespace weft::optim {

namespace {

// The per-step scalars, computed once in f64 as PyTorch does in Python floats.
struct AdamStep {
  double l2;          // weight decay through the gradient (Adam), else 0
  double decay;       // factor on p before the update (AdamW), else 1
  double beta1, beta2;
  double step_size;   // lr / (1 - beta1^t)
  double bc2_sqrt;    // sqrt(1 - beta2^t)
  double eps;
};

// One fused pass over a parameter; the operation order follows PyTorch's single-tensor path so
// f64 results agree with it up to rounding.
template <typename T>
void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, const AdamStep& s) {
  const T l2 = static_cast<T>(s.l2), decay = static_cast<T>(s.decay);
  const T beta1 = static_cast<T>(s.beta1), one_minus_beta1 = static_cast<T>(1 - s.beta1);
  const T beta2 = static_cast<T>(s.beta2), one_minus_beta2 = static_cast<T>(1 - s.beta2);
  const T neg_step_size = static_cast<T>(-s.step_size), bc2_sqrt = static_cast<T>(s.bc2_sqrt);
  const T eps = static_cast<T>(s.eps);
  const bool use_l2 = s.l2 != 0, use_decay = s.decay != 1;
#pragma omp parallel for if (n >= kParallelGrain)
  for (int64_t j = 0; j < n; ++j) {
    T grad = g[j];
    if (use_l2) grad = grad + l2 * p[j];
    T param = use_decay ? p[j] * decay : p[j];
    T mj = m[j] * beta1 + one_minus_beta1 * grad;
    T vj = v[j] * beta2 + one_minus_beta2 * grad * grad;
    m[j] = mj;
    v[j] = vj;
    T denom = std::sqrt(vj) / bc2_sqrt + eps;
    p[j] = param + neg_step_size * mj / denom;
  }
}

AdamOptions from(const AdamWOptions& o) {
  return {.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay,
          .decoupled_weight_decay = true};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam("Adam", std::move(params), options) {}

Adam::Adam(std::string name, std::vector<Tensor> params, AdamOptions options)
    : Optimizer(std::move(name), std::move(params), options.lr), options_(options) {
  check_non_negative("eps", options_.eps);
  check_non_negative("weight_decay", options_.weight_decay);
  for (auto [what, beta] : {std::pair{"beta1", options_.beta1}, std::pair{"beta2", options_.beta2}})
    WEFT_CHECK(beta >= 0 && beta < 1, ValueError, this->name(), ": ", what, " must be in [0, 1), got ", beta);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) : Adam("AdamW", std::move(params), from(options)) {}

std::vector<std::string> Adam::buffer_names() const { return {"exp_avg", "exp_avg_sq"}; }

void Adam::update(Tensor& param, const Tensor& grad, std::vector<Tensor>& buffers, int64_t step) {
  const double t = static_cast<double>(step);
  const bool decoupled = options_.decoupled_weight_decay;
  monitor::OpScope scope(decoupled ? "adamw_step" : "adam_step", {param, grad});
  AdamStep s{.l2 = decoupled ? 0 : options_.weight_decay,
             .decay = decoupled ? 1 - lr() * options_.weight_decay : 1,
             .beta1 = options_.beta1,
             .beta2 = options_.beta2,
             .step_size = lr() / (1 - std::pow(options_.beta1, t)),
             .bc2_sqrt = std::sqrt(1 - std::pow(options_.beta2, t)),
             .eps = options_.eps};
  auto run = [&](auto tag) {
    using T = decltype(tag);
    adam_kernel<T>(param.data<T>(), grad.data<T>(), buffers[0].data<T>(), buffers[1].data<T>(), param.numel(), s);
  };
  if (param.dtype() == DType::f64) run(double{});
  else run(float{});
  // Per element: the moments 7 FLOPs, the denominator 3, the update 3, decay 1, L2 2; p, g, m, v
  // read and p, m, v written.
  if (scope.active())
    scope.set_cost((13.0 + (s.decay != 1) + 2.0 * (s.l2 != 0)) * param.numel(), 7.0 * param.nbytes());
}

}  // namespace weft::optim
