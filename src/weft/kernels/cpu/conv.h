// 2-d convolution kernels (not differentiable; ops/conv.h builds autograd on top).
//
// Layouts are PyTorch's: x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out];
// the output is [N, C_out, OH, OW] with OH = floor((H + 2 pad - dilation (kH - 1) - 1) / stride) + 1.
// f32 and bf16 run on oneDNN, f16 is computed in f32 and rounded once, f64 runs the reference
// loops (it exists for gradient checks). Non-contiguous inputs are made contiguous first.
//
// The three passes are separate so the ops layer asks only for the gradients it needs:
// backward_input needs the weights, backward_weight needs the input (and gives the bias gradient,
// the sum of grad_out over N, OH, OW, from the same pass).
#pragma once
#include <array>

#include "weft/core/tensor.h"

namespace weft::cpu {

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

// Checks ranks, channel counts, groups, params and that the (dilated) kernel fits the padded
// input; throws ShapeError or ValueError naming conv2d and the shapes. Returns the output shape.
Shape conv2d_output_shape(const Shape& x, const Shape& weight, const Conv2dParams& p);

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p);
struct Conv2dWeightGrads { Tensor weight, bias; };  // bias undefined unless asked for
Conv2dWeightGrads conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                         bool with_bias, const Conv2dParams& p);

// Plain loops over every (output, input, weight) triple, accumulated in f64 and returned in the
// inputs' dtype: the definition the oneDNN path is tested against.
namespace reference {
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p);
Conv2dWeightGrads conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                         bool with_bias, const Conv2dParams& p);
}  // namespace reference

}  // namespace weft::cpu
