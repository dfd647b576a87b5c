#include "weft/dist/tensor_parallel.h"

#include <algorithm>
#include <cmath>

#include "weft/autograd/grad_mode.h"
#include "weft/autograd/node.h"
#include "weft/ops/arith.h"
#include "weft/ops/linear.h"

namespace weft::dist {

namespace {

using Grads = std::vector<Tensor>;

// A private contiguous copy (the collectives write in place).
Tensor private_copy(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()).copy_(t); }

int64_t share(int64_t size, const ProcessGroup& group, const char* what) {
  WEFT_CHECK(size % group.size() == 0, ValueError, "tensor parallel: ", what, " (", size,
             ") is not divisible by the group's ", group.size(), " ranks");
  return size / group.size();
}

// [..., k] on every rank -> [..., N k], the ranks' slices side by side in rank order. Not recorded.
Tensor all_gather_last(const Tensor& x, ProcessGroup& group) {
  NoGradGuard no_grad;
  const Tensor in = x.contiguous();
  const int64_t k = in.size(-1), rows = in.numel() / k, ranks = group.size();
  Tensor all = Tensor::empty({ranks * in.numel()}, in.dtype());
  group.all_gather(in.reshape({in.numel()}), all);
  Shape shape = in.shape();
  shape.back() = ranks * k;
  return all.view({ranks, rows, k}).permute({1, 0, 2}).contiguous().view(shape);
}

// This rank's [..., k] of [..., N k]. Not recorded.
Tensor own_slice_last(const Tensor& x, const ProcessGroup& group) {
  NoGradGuard no_grad;
  const int64_t k = share(x.size(-1), group, "the last dimension");
  return private_copy(x.narrow(x.dim() - 1, group.rank() * k, k));
}

// Rows [rank * n, rank * n + n) of dim 0, as a leaf of its own.
Tensor rows_of(const Tensor& t, const ProcessGroup& group, const char* what) {
  NoGradGuard no_grad;
  const int64_t n = share(t.size(0), group, what);
  return private_copy(t.narrow(0, group.rank() * n, n));
}

}  // namespace

Tensor copy_to_parallel_region(const Tensor& x, ProcessGroup& group) {
  Tensor out = x.detach();
  autograd::record("copy_to_parallel_region", {x}, {out}, [&group](const Grads& g) {
    Tensor sum = private_copy(g[0]);
    group.all_reduce(sum, ReduceOp::sum);
    return Grads{sum};
  });
  return out;
}

Tensor reduce_from_parallel_region(const Tensor& x, ProcessGroup& group) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = private_copy(x);
    group.all_reduce(out, ReduceOp::sum);
  }
  autograd::record("reduce_from_parallel_region", {x}, {out}, [](const Grads& g) { return Grads{g[0]}; });
  return out;
}

Tensor scatter_to_parallel_region(const Tensor& x, ProcessGroup& group) {
  Tensor out = own_slice_last(x, group);
  autograd::record("scatter_to_parallel_region", {x}, {out},
                   [&group](const Grads& g) { return Grads{all_gather_last(g[0], group)}; });
  return out;
}

Tensor gather_from_parallel_region(const Tensor& x, ProcessGroup& group) {
  Tensor out = all_gather_last(x, group);
  autograd::record("gather_from_parallel_region", {x}, {out},
                   [&group](const Grads& g) { return Grads{own_slice_last(g[0], group)}; });
  return out;
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, ProcessGroup& group) {
  WEFT_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0), ShapeError,
             "vocab_parallel_cross_entropy: expected logits [rows, vocab / ranks] and targets [rows], got ",
             shape_str(logits.shape()), " and ", shape_str(targets.shape()));
  WEFT_CHECK(targets.dtype() == DType::i64, DTypeError, "vocab_parallel_cross_entropy: targets must be i64, got ",
             dtype_name(targets.dtype()));
  WEFT_CHECK(logits.dtype() == DType::f32 || logits.dtype() == DType::f64, DTypeError,
             "vocab_parallel_cross_entropy: logits must be f32 or f64, got ", dtype_name(logits.dtype()));
  const int64_t rows = logits.size(0), width = logits.size(1), start = group.rank() * width;
  const int64_t vocab = width * group.size();
  const std::vector<double> x = logits.to_vector<double>();
  const std::vector<int64_t> t = targets.contiguous().to_vector<int64_t>();
  for (int64_t i = 0; i < rows; ++i)
    WEFT_CHECK(t[i] >= 0 && t[i] < vocab, IndexError, "vocab_parallel_cross_entropy: target ", t[i], " of row ", i,
               " is outside the vocabulary of ", vocab);
  Tensor maxes = Tensor::empty({rows}, DType::f64), sums = Tensor::zeros({rows}, DType::f64);
  Tensor picked = Tensor::zeros({rows}, DType::f64);
  double* m = maxes.data<double>();
  for (int64_t i = 0; i < rows; ++i) m[i] = *std::max_element(x.begin() + i * width, x.begin() + (i + 1) * width);
  group.all_reduce(maxes, ReduceOp::max);
  double *s = sums.data<double>(), *p = picked.data<double>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < width; ++j) s[i] += std::exp(x[i * width + j] - m[i]);
    if (t[i] >= start && t[i] < start + width) p[i] = x[i * width + t[i] - start];
  }
  group.all_reduce(sums, ReduceOp::sum);
  group.all_reduce(picked, ReduceOp::sum);
  double loss = 0;
  for (int64_t i = 0; i < rows; ++i) loss += std::log(s[i]) + m[i] - p[i];
  Tensor out = Tensor::scalar(loss / static_cast<double>(rows), logits.dtype());
  autograd::record("vocab_parallel_cross_entropy", {logits}, {out},
                   [x, t, maxes, sums, rows, width, start, dtype = logits.dtype()](const Grads& g) {
                     const double factor = g[0].item() / static_cast<double>(rows);
                     const double *m = maxes.data<double>(), *s = sums.data<double>();
                     std::vector<double> grad(x.size());
                     for (int64_t i = 0; i < rows; ++i)
                       for (int64_t j = 0; j < width; ++j)
                         grad[i * width + j] =
                             (std::exp(x[i * width + j] - m[i]) / s[i] - (t[i] == start + j ? 1.0 : 0.0)) * factor;
                     return Grads{Tensor::from_vector(grad, {rows, width}, dtype)};
                   });
  return out;
}

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& whole, ProcessGroup& group, bool gather_output)
    : Module("ColumnParallelLinear"), group_(group), gather_output_(gather_output) {
  weight = register_parameter("weight", rows_of(whole.weight, group, "out_features"));
  if (whole.bias.defined()) bias = register_parameter("bias", rows_of(whole.bias, group, "out_features"));
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  Tensor y = linear(copy_to_parallel_region(x, group_), weight, bias);
  return gather_output_ ? gather_from_parallel_region(y, group_) : y;
}

RowParallelLinear::RowParallelLinear(const nn::Linear& whole, ProcessGroup& group, bool input_is_parallel)
    : Module("RowParallelLinear"), group_(group), input_is_parallel_(input_is_parallel) {
  NoGradGuard no_grad;
  const int64_t k = share(whole.in_features, group, "in_features");
  weight = register_parameter("weight", private_copy(whole.weight.narrow(1, group.rank() * k, k)));
  if (whole.bias.defined()) bias = register_parameter("bias", private_copy(whole.bias));
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Tensor mine = input_is_parallel_ ? x : scatter_to_parallel_region(x, group_);
  Tensor y = reduce_from_parallel_region(linear(mine, weight), group_);
  return bias.defined() ? add(y, bias) : y;
}

}  // namespace weft::dist
