#include "weft/optim/sgd.h"

#include "weft/core/convert.h"
#include "weft/monitor/profiler.h"
#include "weft/optim/simd.h"

namespace weft::optim {

namespace {

// One parameter's per-step scalars, rounded to its dtype.
template <typename T>
struct SGDScalars {
  T grad_factor, weight_decay, momentum, keep, neg_lr;
  bool scale_grad, decay, use_momentum, nesterov, first;
};

template <typename T>
SGDScalars<T> sgd_scalars(const SGDOptions& o, double lr, int64_t step, double grad_factor) {
  return {.grad_factor = static_cast<T>(grad_factor),
          .weight_decay = static_cast<T>(o.weight_decay),
          .momentum = static_cast<T>(o.momentum),
          .keep = static_cast<T>(1 - o.dampening),
          .neg_lr = static_cast<T>(-lr),
          .scale_grad = grad_factor != 1,
          .decay = o.weight_decay != 0,
          .use_momentum = o.momentum != 0,
          .nesterov = o.nesterov,
          .first = step == 1};
}

// One element (`buf` unused without momentum): the reference the vector loop below matches bit
// for bit. The operation order follows torch.optim.SGD's single-tensor path, so f64 results
// agree with it up to rounding.
template <typename T>
void sgd_element(T& p, T g, T& buf, const SGDScalars<T>& s) {
  T d = s.scale_grad ? g * s.grad_factor : g;
  if (s.decay) d = mul_add(s.weight_decay, p, d);
  if (s.use_momentum) {
    buf = s.first ? d : mul_add(s.momentum, buf, s.keep * d);
    d = s.nesterov ? mul_add(s.momentum, buf, d) : buf;
  }
  p = mul_add(s.neg_lr, d, p);
}

// n consecutive elements (`buf` null without momentum): whole vectors, then the reference.
template <typename T, typename G>
void sgd_slice(T* p, const G* g, T* buf, int64_t n, const SGDScalars<T>& s) {
  int64_t j = 0;
#ifdef __AVX512F__
  using V = Vec<T>;
  const auto grad_factor = V::set1(s.grad_factor), weight_decay = V::set1(s.weight_decay);
  const auto momentum = V::set1(s.momentum), keep = V::set1(s.keep), neg_lr = V::set1(s.neg_lr);
  for (; j + V::kLanes <= n; j += V::kLanes) {
    const auto pj = V::load(p + j);
    auto d = V::load(g + j);
    if (s.scale_grad) d = V::mul(d, grad_factor);
    if (s.decay) d = V::mul_add(weight_decay, pj, d);
    if (s.use_momentum) {
      const auto b = s.first ? d : V::mul_add(momentum, V::load(buf + j), V::mul(keep, d));
      V::store(buf + j, b);
      d = s.nesterov ? V::mul_add(momentum, b, d) : b;
    }
    V::store(p + j, V::mul_add(neg_lr, d, pj));
  }
#endif
  T unused = 0;
  for (; j < n; ++j) sgd_element(p[j], convert<T>(g[j]), buf ? buf[j] : unused, s);
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, double lr, SGDOptions options)
    : Optimizer("SGD", std::move(params), lr), options_(options) {
  check_non_negative("momentum", options_.momentum);
  check_non_negative("weight_decay", options_.weight_decay);
  WEFT_CHECK(!options_.nesterov || (options_.momentum > 0 && options_.dampening == 0), ValueError,
             "SGD: Nesterov momentum needs momentum > 0 and dampening == 0, got momentum ",
             options_.momentum, " and dampening ", options_.dampening);
}

std::vector<std::string> SGD::buffer_names() const {
  if (options_.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SGD::update(const std::vector<Segment>& segments, double grad_factor) {
  monitor::OpScope scope(Op::sgd_step, params());
  for_each_slice(segments, [&](size_t i, int64_t begin, int64_t end) {
    const Segment& seg = segments[i];
    visit_types(seg, [&](auto tag, auto grad_tag) {
      using T = decltype(tag);
      using G = decltype(grad_tag);
      T* buf = seg.buffers.empty() ? nullptr : static_cast<T*>(seg.buffers[0]) + begin;
      sgd_slice<T, G>(static_cast<T*>(seg.param) + begin, static_cast<const G*>(seg.grad) + begin, buf, end - begin,
                      sgd_scalars<T>(options_, lr(), seg.step, grad_factor));
    });
  });
  // Per element: the update 2 FLOPs, weight decay 2, momentum 3, Nesterov 2, the grad factor 1;
  // p and g read and p written, and the momentum buffer read and written.
  if (scope.active()) {
    const bool momentum = options_.momentum != 0;
    double numel = 0, bytes = 0;
    for (const Segment& seg : segments) {
      numel += static_cast<double>(seg.numel);
      bytes += (3.0 + 2.0 * momentum) * static_cast<double>(seg.numel * static_cast<int64_t>(dtype_size(seg.dtype)));
    }
    const double flops = 2.0 + 2.0 * (options_.weight_decay != 0) + 3.0 * momentum + 2.0 * options_.nesterov +
                         (grad_factor != 1);
    scope.set_cost(flops * numel, bytes);
  }
}

}  // namespace weft::optim
