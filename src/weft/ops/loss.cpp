#include "weft/ops/loss.h"

#include <limits>

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using kernels::Binary;
using kernels::KernelTable;
using kernels::Unary;
using Grads = std::vector<Tensor>;

// log_softmax and nll in one kernel each way: the probabilities are never materialised, and
// the backward is (softmax - smoothed one-hot) * g / count from the saved log-sum-exp.
Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  const Tensor logits = autocast(Op::cross_entropy, logits_in);
  monitor::OpScope scope(Op::cross_entropy, {logits, target});
  WEFT_CHECK(label_smoothing >= 0 && label_smoothing <= 1, ValueError,
             "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  const KernelTable& k = kernels::of(logits);
  kernels::CrossEntropyForward f = k.cross_entropy_forward(logits, target, ignore_index, label_smoothing);
  // Under autocast 16-bit logits come in uncast, and the loss is f32 as if they had been widened.
  const bool widened_inside = autocast_dtype() && (logits.dtype() == DType::bf16 || logits.dtype() == DType::f16);
  const DType loss_dtype = widened_inside ? DType::f32 : logits.dtype();
  Tensor out;
  double scale = 1;
  if (reduction == Reduction::none) {
    out = Tensor::empty(f.loss.shape(), loss_dtype).copy_(f.loss);
  } else {
    double total = k.sum(f.loss, {}, false).item();
    if (reduction == Reduction::mean) {
      // No counted target: the mean is 0/0 (NaN, as PyTorch), and nothing gets a gradient.
      total = f.count > 0 ? total / static_cast<double>(f.count) : std::numeric_limits<double>::quiet_NaN();
      scale = f.count > 0 ? 1.0 / static_cast<double>(f.count) : 0.0;
    }
    out = Tensor::scalar(total, loss_dtype);
  }
  if (scope.active()) scope.set_cost_per_element(logits, {logits, target, f.lse, out});
  record(op_name(Op::cross_entropy), {logits, target}, {out},
         [logits = logits.detach(), target, lse = f.lse, scale, ignore_index, label_smoothing](const Grads& g) {
           return Grads{
               kernels::of(g[0]).cross_entropy_backward(g[0], scale, logits, target, lse, ignore_index, label_smoothing),
               Tensor()};
         });
  return out;
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast(Op::mse_loss, input_in), target = autocast(Op::mse_loss, target_in);
  WEFT_CHECK(input.defined() && target.defined(), ValueError, "mse_loss: undefined tensor");
  WEFT_CHECK(input.shape() == target.shape(), ShapeError, "mse_loss: input ", shape_str(input.shape()),
             " and target ", shape_str(target.shape()),
             " must have exactly the same shape (no broadcasting; reshape one if that was intended)");
  WEFT_CHECK(input.dtype() == target.dtype(), DTypeError, "mse_loss: input is ", dtype_name(input.dtype()),
             " but target is ", dtype_name(target.dtype()));
  monitor::OpScope scope(Op::mse_loss, {input, target});
  const KernelTable& k = kernels::of(input);
  Tensor diff = k.binary(Binary::sub, input, target);
  Tensor out = k.unary(Unary::square, diff);
  // d/d input = 2 (input - target) g, divided by the element count for the mean.
  double scale = 2;
  if (reduction != Reduction::none) out = k.sum(out, {}, false);
  if (reduction == Reduction::mean) {
    const double n = static_cast<double>(input.numel());
    out = k.binary_scalar(Binary::mul, out, 1.0 / n);
    scale /= n;
  }
  if (scope.active()) scope.set_cost_per_element(input, {input, target, diff, diff, out});
  record(op_name(Op::mse_loss), {input, target}, {out},
         [diff, scale, need_input = input.requires_grad(), need_target = target.requires_grad()](const Grads& g) {
           const KernelTable& k = kernels::of(g[0]);
           Tensor grad = k.binary_scalar(Binary::mul, k.binary(Binary::mul, diff, g[0]), scale);
           return Grads{need_input ? grad : Tensor(), need_target ? k.unary(Unary::neg, grad) : Tensor()};
         });
  return out;
}

}  // namespace weft
