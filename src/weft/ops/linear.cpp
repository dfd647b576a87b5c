#include "weft/ops/linear.h"

#include <algorithm>

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

// t with its last two dims swapped: a strided view that the matmul kernel reads in place.
Tensor transposed(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[t.dim() - 1], shape[t.dim() - 2]);
  std::swap(strides[t.dim() - 1], strides[t.dim() - 2]);
  return t.as_strided(shape, strides, t.storage_offset());
}

// t's elements, in row-major order, seen as `shape` (a view when t is contiguous).
Tensor reshaped(const Tensor& t, const Shape& shape) {
  Tensor c = t.contiguous_untracked();
  return c.as_strided(shape, contiguous_strides(shape), c.storage_offset());
}

bool batch_is_ones(const Shape& shape) {
  return std::all_of(shape.begin(), shape.end() - 2, [](int64_t s) { return s == 1; });
}

}  // namespace

// A 1-d operand is a [1, K] row on the left or a [K, 1] column on the right, and that added dim
// is dropped from the result, as in torch.matmul. The kernel broadcasts the batch dims; the
// backward sums each gradient back over the dims its operand was broadcast along.
Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast(Op::matmul, a_in), b = autocast(Op::matmul, b_in);
  monitor::OpScope scope(Op::matmul, {a, b});
  WEFT_CHECK(a.defined() && b.defined(), ValueError, "matmul: undefined operand");
  WEFT_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: both operands need at least 1 dim, got a ",
             shape_str(a.shape()), " and b ", shape_str(b.shape()));
  const int64_t ka = a.shape().back(), kb = b.shape()[std::max<int64_t>(0, b.dim() - 2)];
  WEFT_CHECK(ka == kb, ShapeError, "matmul: a ", shape_str(a.shape()), " and b ", shape_str(b.shape()),
             " do not chain: a has ", ka, " columns but b has ", kb, " rows");
  Tensor a2 = a.dim() == 1 ? a.as_strided({1, ka}, {ka * a.strides()[0], a.strides()[0]}, a.storage_offset()) : a;
  Tensor b2 = b.dim() == 1 ? b.as_strided({kb, 1}, {b.strides()[0], 1}, b.storage_offset()) : b;
  Tensor out2 = kernels::of(a).matmul(a2, b2, {}, std::nullopt);
  Shape shape = out2.shape();
  if (b.dim() == 1) shape.pop_back();
  if (a.dim() == 1) shape.erase(shape.end() - (b.dim() == 1 ? 1 : 2));
  Tensor out = reshaped(out2, shape);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  // Each gradient needs only the other operand: save just that, so activations are not kept
  // alive for a gradient nobody asked for.
  record(op_name(Op::matmul), {a, b}, {out},
         [a2 = need_b ? a2.detach() : Tensor(), b2 = need_a ? b2.detach() : Tensor(), a_shape = a.shape(),
          b_shape = b.shape(), a2_shape = a2.shape(), b2_shape = b2.shape(), out2_shape = out2.shape()](const Grads& g) {
           const kernels::KernelTable& k = kernels::of(g[0]);
           Tensor g2 = reshaped(g[0], out2_shape);
           Tensor ga, gb;
           if (b2.defined())  // dL/da = g @ b^T, summed over the batch dims a was broadcast along
             ga = reshaped(k.sum_to(k.matmul(g2, transposed(b2), {}, std::nullopt), a2_shape), a_shape);
           if (a2.defined()) {
             if (batch_is_ones(b2_shape))
               // b is shared by every batch: the sum over batches of a_i^T g_i is one GEMM over
               // all rows, [K, batch * M] @ [batch * M, N].
               gb = reshaped(k.matmul(transposed(k.fold_rows(a2)), k.fold_rows(g2), {}, std::nullopt), b_shape);
             else  // dL/db = a^T @ g, summed over the batch dims b was broadcast along
               gb = reshaped(k.sum_to(k.matmul(transposed(a2), g2, {}, std::nullopt), b2_shape), b_shape);
           }
           return Grads{ga, gb};
         });
  if (scope.active()) {  // 2·M·N·K per batch: a multiply and an add per term; backward one such GEMM per gradient
    const double flops = 2.0 * static_cast<double>(out2.numel()) * static_cast<double>(ka);
    scope.set_cost(flops, monitor::bytes_of({a, b, out}));
    autograd::set_backward_cost(out, flops * (need_a + need_b), need_b * a.nbytes() + need_a * b.nbytes());
  }
  return out;
}

// One GEMM for the whole batch: x's leading dims fold into rows ([rows, in], a view when x's
// strides allow), the weight goes in as its transposed view [in, out] and the bias is added by
// oneDNN in the same pass, so no copy of x or W and no second sweep over the output. Under
// autocast x, the weight and the bias are cast unrecorded and the backward is recorded against
// the tensors given, so their gradients come out in their own dtype, an f32 x's and weight's
// straight from the GEMMs' f32 accumulators: no cast in the backward.
Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const Tensor x = autocast_operand(Op::linear, x_in);
  const Tensor weight = autocast_operand(Op::linear, weight_in);
  // oneDNN adds an f32 bias to a 16-bit GEMM's f32 accumulators itself: no cast needed.
  const Tensor bias = bias_in.defined() && bias_in.dtype() == DType::f32 ? bias_in : autocast_operand(Op::linear, bias_in);
  monitor::OpScope scope(Op::linear, {x, weight, bias});
  WEFT_CHECK(x.defined() && weight.defined(), ValueError, "linear: undefined input or weight");
  WEFT_CHECK(x.dim() >= 1 && weight.dim() == 2, ShapeError, "linear: expected x [..., in] and weight [out, in], got x ",
             shape_str(x.shape()), " and weight ", shape_str(weight.shape()));
  const int64_t in = weight.shape()[1], out_features = weight.shape()[0];
  WEFT_CHECK(x.shape().back() == in, ShapeError, "linear: x ", shape_str(x.shape()), " has ", x.shape().back(),
             " features but weight ", shape_str(weight.shape()), " expects ", in);
  WEFT_CHECK(x.dtype() == weight.dtype(), DTypeError, "linear: x is ", dtype_name(x.dtype()), " ",
             shape_str(x.shape()), " but weight is ", dtype_name(weight.dtype()), " ", shape_str(weight.shape()));
  WEFT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.shape()[0] == out_features), ShapeError, "linear: bias ",
             shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()), " (expected [",
             out_features, "])");
  const kernels::KernelTable& k = kernels::of(x);
  Tensor x2 = k.fold_rows(x);
  Shape shape = x.shape();
  shape.back() = out_features;
  Tensor out = reshaped(k.matmul(x2, transposed(weight), bias, std::nullopt), shape);
  const bool need_x = x_in.requires_grad(), need_w = weight_in.requires_grad();
  const bool need_b = bias_in.defined() && bias_in.requires_grad();
  record(op_name(Op::linear), {x_in, weight_in, bias_in}, {out},
         [x2 = need_w ? x2.detach() : Tensor(), w = need_x ? weight.detach() : Tensor(), x_shape = x.shape(), need_b,
          x_dtype = x_in.dtype(), weight_dtype = weight_in.dtype(),
          bias_dtype = bias_in.defined() ? bias_in.dtype() : x.dtype()](const Grads& g) {
           const kernels::KernelTable& k = kernels::of(g[0]);
           Tensor g2 = k.fold_rows(g[0]);  // [rows, out]
           Tensor gx, gw, gb;
           if (w.defined()) gx = reshaped(k.matmul(g2, w, {}, x_dtype), x_shape);  // [rows, out] @ [out, in]
           if (x2.defined()) gw = k.matmul(transposed(g2), x2, {}, weight_dtype);  // [out, rows] @ [rows, in]
           if (need_b) {
             gb = k.sum(g2, {0}, false);
             if (gb.dtype() != bias_dtype) gb = Tensor::empty(gb.shape(), bias_dtype).copy_(gb);
           }
           return Grads{gx, gw, gb};
         });
  if (scope.active()) {  // 2·rows·in·out, + rows·out for the bias; backward a GEMM per gradient, a sum for the bias
    const double gemm = 2.0 * static_cast<double>(x2.shape()[0]) * static_cast<double>(in * out_features);
    const double bias_adds = bias.defined() ? static_cast<double>(out.numel()) : 0;
    scope.set_cost(gemm + bias_adds, monitor::bytes_of({x, weight, bias, out}));
    autograd::set_backward_cost(out, gemm * (need_x + need_w) + (need_b ? bias_adds : 0),
                                need_w * x.nbytes() + need_x * weight.nbytes());
  }
  return out;
}

}  // namespace weft
