#include "weft/optim/clip.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/autograd/grad_mode.h"
#include "weft/core/convert.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/monitor/profiler.h"

namespace weft::optim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// sum |x|^p over `g` (p finite), or max |x| with NaN propagating (p infinite), in f64.
double norm_contribution(const Tensor& grad, double p) {
  Tensor g = grad.contiguous_untracked();
  const int64_t n = g.numel();
  return visit_dtype(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(g.data_ptr());
    auto abs_at = [x](int64_t j) { return std::abs(static_cast<double>(static_cast<compute_type<T>>(x[j]))); };
    double acc = 0;
    if (std::isinf(p)) {
      bool any_nan = false;
#pragma omp parallel for reduction(max : acc) reduction(|| : any_nan) if (n >= kParallelGrain)
      for (int64_t j = 0; j < n; ++j) {
        double a = abs_at(j);
        any_nan = any_nan || std::isnan(a);
        acc = std::max(acc, a);
      }
      return any_nan ? kNaN : acc;
    }
    if (p == 2) {
#pragma omp parallel for reduction(+ : acc) if (n >= kParallelGrain)
      for (int64_t j = 0; j < n; ++j) {
        double a = abs_at(j);
        acc += a * a;
      }
    } else {
#pragma omp parallel for reduction(+ : acc) if (n >= kParallelGrain)
      for (int64_t j = 0; j < n; ++j) acc += std::pow(abs_at(j), p);
    }
    return acc;
  });
}

}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  WEFT_CHECK(max_norm >= 0, ValueError, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  WEFT_CHECK(norm_type > 0, ValueError, "clip_grad_norm: norm_type must be > 0 or INFINITY, got ", norm_type);
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0;
  monitor::OpScope scope("clip_grad_norm", grads);

  double total = 0;
  if (std::isinf(norm_type)) {
    for (const Tensor& g : grads) {
      double m = norm_contribution(g, norm_type);
      total = std::isnan(m) || std::isnan(total) ? kNaN : std::max(total, m);
    }
  } else {
    for (const Tensor& g : grads) total += norm_contribution(g, norm_type);
    total = norm_type == 2 ? std::sqrt(total) : std::pow(total, 1 / norm_type);
  }

  double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1)) {  // also scales by a NaN factor, as PyTorch does
    NoGradGuard no_grad;
    for (Tensor& g : grads) cpu::binary_(cpu::Binary::mul, g, Tensor::scalar(coef, g.dtype()));
  }
  if (scope.active()) {  // |x|^p and a sum per element, read once; scaling reads and writes once more
    const bool scaled = !(coef >= 1);
    double n = 0;
    for (const Tensor& g : grads) n += static_cast<double>(g.numel());
    scope.set_cost((2.0 + scaled) * n, (1.0 + 2.0 * scaled) * monitor::bytes_of(grads));
  }
  return total;
}

}  // namespace weft::optim
