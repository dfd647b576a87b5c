// Softmax-family kernels (not differentiable; ops/activation.h and ops/loss.h build on them).
//
// softmax / log_softmax work along any dim: x is read as [outer, n, inner] (made contiguous if
// it is not), n the reduced dim. inner == 1 is the common case (attention rows, logits) and
// runs one row per task; inner > 1 (channels, a leading dim) walks blocks of columns so the
// inner loop stays unit-stride. Both subtract the maximum before exp, so no input overflows.
// f16 / bf16 / f32 accumulate in f32, f64 in f64; outputs are contiguous in x's dtype.
//
// The backward kernels take the forward *output* y, which is all they need:
//   softmax:     dx = y * (g - sum(g * y))
//   log_softmax: dx = g - exp(y) * sum(g)
//
// cross_entropy_forward is log_softmax + nll fused over the class dim (dim 1 of logits
// [N, C, d1...], or the only dim of [C]): per position it returns
//   loss = (1 - eps) * (lse - x[t]) + eps * (lse - mean_c x[c])   (PyTorch's label smoothing)
// with lse = log sum_c exp(x[c]), 0 where the target is ignore_index, and saves lse so the
// backward needs one pass: dx[c] = (exp(x[c] - lse) - q[c]) * g, q = (1 - eps) one_hot(t) + eps / C.
#pragma once
#include <cstdint>

#include "weft/core/tensor.h"

namespace weft::cpu {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim);

struct CrossEntropyForward {
  Tensor loss;        // target's shape, f32 (f64 for f64 logits); 0 at ignored positions
  Tensor lse;         // same shape and dtype: log-sum-exp over classes, saved for backward
  int64_t count = 0;  // positions whose target is not ignore_index
};
// Checks target (i64, logits' shape without the class dim, each value in [0, C) or ignore_index).
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                          double label_smoothing);
// grad_loss: one element (broadcast to every position) or target's shape; each position's
// gradient is grad_loss * scale (scale = 1 / count for the mean). Returns dlogits in logits' dtype.
Tensor cross_entropy_backward(const Tensor& grad_loss, double scale, const Tensor& logits, const Tensor& target,
                              const Tensor& lse, int64_t ignore_index, double label_smoothing);

namespace reference {
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                     double label_smoothing);  // per-position loss, f64
Tensor cross_entropy_backward(const Tensor& grad_loss, double scale, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index, double label_smoothing);
}  // namespace reference

}  // namespace weft::cpu
