#include "weft/ops/norm.h"

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

// What a normalisation's backward keeps: x and weight detached (it reads only their values),
// the statistics, and which parameter gradients to form, in which shapes (the kernels return
// them flat).
struct Saved {
  Tensor x, weight, mean, rstd;
  bool need_dweight = false, need_dbias = false;
  Shape weight_shape, bias_shape;
};

Saved save(const Tensor& x, const Tensor& weight, const Tensor& bias, const kernels::NormForward& f) {
  Saved s;
  s.x = x.detach();
  s.weight = weight.defined() ? weight.detach() : Tensor();
  s.mean = f.mean;
  s.rstd = f.rstd;
  s.need_dweight = weight.defined() && weight.requires_grad();
  s.need_dbias = bias.defined() && bias.requires_grad();
  if (weight.defined()) s.weight_shape = weight.shape();
  if (bias.defined()) s.bias_shape = bias.shape();
  return s;
}

Tensor shaped(const Tensor& flat, const Shape& shape) {
  return flat.defined() ? flat.as_strided(shape, contiguous_strides(shape), flat.storage_offset()) : flat;
}

Grads to_grads(const kernels::NormBackward& b, const Saved& s) {
  return Grads{b.dx, shaped(b.dweight, s.weight_shape), shaped(b.dbias, s.bias_shape)};
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  const Tensor x = autocast(Op::layer_norm, x_in), weight = autocast(Op::layer_norm, weight_in),
               bias = autocast(Op::layer_norm, bias_in);
  WEFT_CHECK(x.defined(), ValueError, "layer_norm: undefined tensor");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool trailing = k >= 1 && k <= x.dim();
  for (int64_t i = 0; trailing && i < k; ++i) trailing = x.shape()[x.dim() - k + i] == normalized_shape[i];
  WEFT_CHECK(trailing, ShapeError, "layer_norm: normalized_shape ", shape_str(normalized_shape),
             " must be the non-empty trailing dims of x, which has shape ", shape_str(x.shape()));
  for (auto [p, name] : {std::pair<const Tensor*, const char*>{&weight, "weight"}, {&bias, "bias"}})
    WEFT_CHECK(!p->defined() || p->shape() == normalized_shape, ShapeError, "layer_norm: ", name, " has shape ",
               shape_str(p->shape()), " but normalized_shape is ", shape_str(normalized_shape));
  monitor::OpScope scope(Op::layer_norm, {x, weight, bias});
  kernels::NormForward f = kernels::of(x).layer_norm(x, numel(normalized_shape), weight, bias, eps);
  if (scope.active()) scope.set_cost_per_element(x, {x, weight, bias, f.y});
  record(op_name(Op::layer_norm), {x, weight, bias}, {f.y}, [s = save(x, weight, bias, f)](const Grads& g) {
    const kernels::KernelTable& k = kernels::of(g[0]);
    return to_grads(k.layer_norm_backward(g[0], s.x, s.mean, s.rstd, s.weight, s.need_dweight, s.need_dbias), s);
  });
  return f.y;
}

// Training normalises with the batch's statistics (and updates the running ones); eval uses the
// running statistics, or the batch's when there are none (as PyTorch does with
// track_running_stats=False). The backward follows whichever statistics were used.
Tensor batch_norm(const Tensor& x_in, Tensor running_mean, Tensor running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
  const Tensor x = autocast(Op::batch_norm, x_in), weight = autocast(Op::batch_norm, weight_in),
               bias = autocast(Op::batch_norm, bias_in);
  const bool use_batch_stats = training || !running_mean.defined();
  monitor::OpScope scope(Op::batch_norm, {x, weight, bias});
  kernels::NormForward f =
      kernels::of(x).batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, momentum, eps);
  if (scope.active()) scope.set_cost_per_element(x, {x, weight, bias, f.y});
  record(op_name(Op::batch_norm), {x, weight, bias}, {f.y}, [s = save(x, weight, bias, f), use_batch_stats](const Grads& g) {
    return to_grads(kernels::of(g[0]).batch_norm_backward(g[0], s.x, s.mean, s.rstd, s.weight, use_batch_stats,
                                                           s.need_dweight, s.need_dbias),
                    s);
  });
  return f.y;
}

}  // namespace weft
