// 2-d convolution on oneDNN (NCHW-shaped activations, stored channels-last: kernels/cpu/layout.h;
// OIHW weights; f32, bf16; f64 via reference loops).
#pragma once
#include <array>

#include "weft/core/tensor.h"
#include "weft/ops/pool.h"

namespace weft {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

// x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});
// relu(conv2d(...)) as one op: the ReLU is applied as the convolution writes its output, saving the
// pass over it that a separate relu makes, and its backward masks the gradient by output > 0
// before the convolution's backward. Values and gradients equal the two ops'.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});
// max_pool2d(conv2d_relu(...)), the block of LeNet- and VGG-style image models, as one op. Its
// backward masks the pooled gradient by pooled > 0 and then routes it back through the pooling:
// the same gradient as masking the full-size one by the ReLU's output > 0 (a window's maximum is
// positive exactly when the element it picked is, and only picked elements get a gradient), without
// a pass over the full-size gradient; and the full-size activation is not kept for the backward.
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& conv,
                              const Pool2dOptions& pool);

}  // namespace weft
