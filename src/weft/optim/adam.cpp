#include "weft/optim/adam.h"

#include <cmath>

#include "weft/core/convert.h"
#include "weft/monitor/profiler.h"
#include "weft/optim/simd.h"

namespace weft::optim {

namespace {

// One parameter's per-step scalars, computed in f64 as PyTorch does in Python floats, then
// rounded to the parameter's dtype.
template <typename T>
struct AdamScalars {
  T grad_factor, l2, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps;
  bool scale_grad, use_l2, use_decay;
};

template <typename T>
AdamScalars<T> adam_scalars(const AdamOptions& o, double lr, int64_t step, double grad_factor) {
  const double t = static_cast<double>(step);
  const bool decoupled = o.decoupled_weight_decay;
  // 1 - lr * weight_decay rounded once, as contraction compiled it before (see simd.h).
  const double l2 = decoupled ? 0 : o.weight_decay, decay = decoupled ? mul_add(-lr, o.weight_decay, 1.0) : 1;
  return {.grad_factor = static_cast<T>(grad_factor),
          .l2 = static_cast<T>(l2),
          .decay = static_cast<T>(decay),
          .beta1 = static_cast<T>(o.beta1),
          .one_minus_beta1 = static_cast<T>(1 - o.beta1),
          .beta2 = static_cast<T>(o.beta2),
          .one_minus_beta2 = static_cast<T>(1 - o.beta2),
          .neg_step_size = static_cast<T>(-(lr / (1 - std::pow(o.beta1, t)))),
          .bc2_sqrt = static_cast<T>(std::sqrt(1 - std::pow(o.beta2, t))),
          .eps = static_cast<T>(o.eps),
          .scale_grad = grad_factor != 1,
          .use_l2 = l2 != 0,
          .use_decay = decay != 1};
}

// One element: the reference the vector loop below matches bit for bit. The operation order
// follows PyTorch's single-tensor path, so f64 results agree with it up to rounding.
template <typename T>
void adam_element(T& p, T g, T& m, T& v, const AdamScalars<T>& s) {
  T grad = s.scale_grad ? g * s.grad_factor : g;
  if (s.use_l2) grad = mul_add(s.l2, p, grad);
  const T param = s.use_decay ? p * s.decay : p;
  m = mul_add(s.beta1, m, s.one_minus_beta1 * grad);
  v = mul_add(s.beta2, v, s.one_minus_beta2 * grad * grad);
  const T denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
  p = param + s.neg_step_size * m / denom;
}

// n consecutive elements: whole vectors, then the reference for the rest.
template <typename T, typename G>
void adam_slice(T* p, const G* g, T* m, T* v, int64_t n, const AdamScalars<T>& s) {
  int64_t j = 0;
#ifdef __AVX512F__
  using V = Vec<T>;
  const auto grad_factor = V::set1(s.grad_factor), l2 = V::set1(s.l2), decay = V::set1(s.decay);
  const auto beta1 = V::set1(s.beta1), one_minus_beta1 = V::set1(s.one_minus_beta1);
  const auto beta2 = V::set1(s.beta2), one_minus_beta2 = V::set1(s.one_minus_beta2);
  const auto neg_step_size = V::set1(s.neg_step_size), bc2_sqrt = V::set1(s.bc2_sqrt), eps = V::set1(s.eps);
  for (; j + V::kLanes <= n; j += V::kLanes) {
    const auto pj = V::load(p + j);
    auto grad = V::load(g + j);
    if (s.scale_grad) grad = V::mul(grad, grad_factor);
    if (s.use_l2) grad = V::mul_add(l2, pj, grad);
    const auto param = s.use_decay ? V::mul(pj, decay) : pj;
    const auto mj = V::mul_add(beta1, V::load(m + j), V::mul(one_minus_beta1, grad));
    const auto vj = V::mul_add(beta2, V::load(v + j), V::mul(V::mul(one_minus_beta2, grad), grad));
    V::store(m + j, mj);
    V::store(v + j, vj);
    const auto denom = V::add(V::div(V::sqrt(vj), bc2_sqrt), eps);
    V::store(p + j, V::add(param, V::div(V::mul(neg_step_size, mj), denom)));
  }
#endif
  for (; j < n; ++j) adam_element(p[j], convert<T>(g[j]), m[j], v[j], s);
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

void Adam::update(const std::vector<Segment>& segments, double grad_factor) {
  const bool decoupled = options_.decoupled_weight_decay;
  monitor::OpScope scope(decoupled ? Op::adamw_step : Op::adam_step, params());
  for_each_slice(segments, [&](size_t i, int64_t begin, int64_t end) {
    const Segment& seg = segments[i];
    visit_types(seg, [&](auto tag, auto grad_tag) {
      using T = decltype(tag);
      using G = decltype(grad_tag);
      adam_slice<T, G>(static_cast<T*>(seg.param) + begin, static_cast<const G*>(seg.grad) + begin,
                       static_cast<T*>(seg.buffers[0]) + begin, static_cast<T*>(seg.buffers[1]) + begin, end - begin,
                       adam_scalars<T>(options_, lr(), seg.step, grad_factor));
    });
  });
  // Per element: the moments 7 FLOPs, the denominator 3, the update 3, decay 1, L2 2, the grad
  // factor 1; p, g, m, v read and p, m, v written.
  if (scope.active()) {
    double numel = 0, bytes = 0;
    for (const Segment& seg : segments) {
      numel += static_cast<double>(seg.numel);
      bytes += 7.0 * static_cast<double>(seg.numel * static_cast<int64_t>(dtype_size(seg.dtype)));
    }
    const bool l2 = !decoupled && options_.weight_decay != 0, decay = decoupled && lr() * options_.weight_decay != 0;
    scope.set_cost((13.0 + decay + 2.0 * l2 + (grad_factor != 1)) * numel, bytes);
  }
}

}  // namespace weft::optim
