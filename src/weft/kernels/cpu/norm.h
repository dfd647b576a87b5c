// Normalisation kernels (not differentiable; ops/norm.h builds autograd on top).
//
// layer_norm reads x as [M, D] rows (D = the normalised trailing elements) and normalises each
// row; batch_norm reads x [N, C, S...] as N x C x S and normalises each channel over N and S.
// Both return the per-row / per-channel mean and rstd = 1 / sqrt(var + eps) (biased variance)
// in f32 (f64 for f64 x), which is all their backward needs besides x itself:
//   xhat = (x - mean) * rstd,  y = xhat * w + b
//   dw = sum g * xhat,  db = sum g
//   dx = w * rstd * (g - mean(g) - xhat * mean(g * xhat))   (statistics of the batch)
//   dx = w * rstd * g                                        (fixed statistics: batch_norm eval)
// where the sums and means run over the normalised elements. weight / bias may be undefined
// (w = 1, b = 0); when defined they are [D] / [C] in x's dtype. Each kernel makes one pass to
// reduce and one to write, f32 accumulation for f32 / f16 / bf16 and f64 for f64.
#pragma once
#include <cstdint>

#include "weft/core/tensor.h"

namespace weft::cpu {

struct NormForward {
  Tensor y;          // x's shape and dtype
  Tensor mean, rstd; // [M] for layer_norm, [C] for batch_norm; f32, or f64 for f64 x
};
struct NormBackward {
  Tensor dx, dweight, dbias;  // dweight / dbias: flat [D] / [C], undefined unless asked for
};

// normalized_numel: the product of the normalised trailing dims (x.numel() must be a multiple).
NormForward layer_norm(const Tensor& x, int64_t normalized_numel, const Tensor& weight, const Tensor& bias,
                       double eps);
NormBackward layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& weight, bool need_dweight, bool need_dbias);

// With use_batch_stats, normalises with the statistics of this batch and, when running_mean /
// running_var are defined, updates them in place:
//   running = (1 - momentum) * running + momentum * batch   (the variance unbiased: * n / (n - 1))
// Otherwise normalises with the running statistics (which must then be defined). The running
// tensors are [C] of any floating dtype.
NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool use_batch_stats, double momentum, double eps);
NormBackward batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& weight, bool used_batch_stats, bool need_dweight, bool need_dbias);

namespace reference {
NormForward layer_norm(const Tensor& x, int64_t normalized_numel, const Tensor& weight, const Tensor& bias,
                       double eps);
NormBackward layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& weight, bool need_dweight, bool need_dbias);
// Returns the statistics it normalised with; does not touch running stats (tests check the update).
NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool use_batch_stats, double eps);
NormBackward batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& weight, bool used_batch_stats, bool need_dweight, bool need_dbias);
}  // namespace reference

}  // namespace weft::cpu
