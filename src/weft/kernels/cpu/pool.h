// 2-d pooling kernels over NCHW tensors (not differentiable; ops/pool.h builds autograd on top).
//
// The oneDNN paths keep their input's layout: a channels-last input (layout.h) gives a
// channels-last output, and its backward, told so, a channels-last gradient; any other input is
// pooled as plain NCHW.
//
// max and avg pooling run on oneDNN for f32 and bf16, in f32 for f16, and as the reference loops
// for f64 (gradient checks). Output size per spatial dim: floor((H + 2 pad - kernel) / stride) + 1
// (PyTorch's ceil_mode=false); padding may be at most half the kernel, so no window lies wholly in
// the padding. Max pooling ignores padded positions and picks the first maximum of a window; its
// backward routes each gradient to that one input through the forward's workspace. A NaN in a
// window wins in the reference loops (and so in f64), as in PyTorch, but oneDNN's kernels skip
// NaNs: checking for them would cost another pass over the input. Average pooling divides by
// kernel[0] * kernel[1] everywhere, padded positions counted as zeros (count_include_pad=true).
//
// adaptive_avg_pool2d averages bin [floor(i H / out), ceil((i + 1) H / out)) in each dim, as
// PyTorch does; bins overlap when out does not divide H. It is plain loops (accumulating in f32,
// f64 for f64) and is its own reference.
#pragma once
#include <array>

#include "weft/core/tensor.h"

namespace weft::cpu {

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{2, 2};
  std::array<int64_t, 2> padding{0, 0};
};

// Checks rank, params and that the kernel fits the padded input (ShapeError / ValueError naming
// `op` and the shapes); returns the output shape.
Shape pool2d_output_shape(const char* op, const Shape& x, const Pool2dParams& p);

// workspace: what the backward needs to find each window's maximum. oneDNN's opaque bytes (u8) for
// f32 / bf16 / f16, or the argmax (i64, h * W + w within each plane) from the reference loops.
// The workspace is laid out for the forward's layout, so its backward must be given the same
// `channels_last` (is_channels_last of its input).
struct MaxPool2dResult { Tensor out, workspace; };
MaxPool2dResult max_pool2d(const Tensor& x, const Pool2dParams& p, bool with_workspace);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& workspace, const Shape& x_shape,
                           const Pool2dParams& p, bool channels_last = false);

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p,
                           bool channels_last = false);

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape);

// Plain loops in f64, results in the input's dtype.
namespace reference {
MaxPool2dResult max_pool2d(const Tensor& x, const Pool2dParams& p);  // workspace: the i64 argmax
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& argmax, const Shape& x_shape,
                           const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p);
}  // namespace reference

}  // namespace weft::cpu
