#include "weft/optim/sgd.h"

#include "weft/core/threads.h"
#include "weft/monitor/profiler.h"

namespace weft::optim {

namespace {

// One fused pass over a parameter; `buf` is null without momentum. The operation order follows
// torch.optim.SGD's single-tensor path so f64 results agree with it up to rounding.
template <typename T>
void sgd_kernel(T* p, const T* g, T* buf, int64_t n, double lr, const SGDOptions& o, bool first) {
  const T wd = static_cast<T>(o.weight_decay), momentum = static_cast<T>(o.momentum);
  const T keep = static_cast<T>(1 - o.dampening), neg_lr = static_cast<T>(-lr);
  const bool decay = o.weight_decay != 0, nesterov = o.nesterov;
#pragma omp parallel for if (n >= kParallelGrain)
  for (int64_t j = 0; j < n; ++j) {
    T d = g[j];
    if (decay) d = d + wd * p[j];
    if (buf) {
      T b = first ? d : buf[j] * momentum + keep * d;
      buf[j] = b;
      d = nesterov ? d + momentum * b : b;
    }
    p[j] = p[j] + neg_lr * d;
  }
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

void SGD::update(Tensor& param, const Tensor& grad, std::vector<Tensor>& buffers, int64_t step) {
  monitor::OpScope scope("sgd_step", {param, grad});
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* buf = buffers.empty() ? nullptr : buffers[0].data<T>();
    sgd_kernel<T>(param.data<T>(), grad.data<T>(), buf, param.numel(), lr(), options_, step == 1);
  };
  if (param.dtype() == DType::f64) run(double{});
  else run(float{});
  // Per element: the update 2 FLOPs, weight decay 2, momentum 3, Nesterov 2; p and g read and p
  // written, and the momentum buffer read and written.
  if (scope.active()) {
    const bool momentum = !buffers.empty();
    const double flops = 2.0 + 2.0 * (options_.weight_decay != 0) + 3.0 * momentum + 2.0 * options_.nesterov;
    scope.set_cost(flops * param.numel(), (3.0 + 2.0 * momentum) * param.nbytes());
  }
}

}  // namespace weft::optim
