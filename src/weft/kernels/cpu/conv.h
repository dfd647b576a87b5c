// 2-d convolution kernels (not differentiable; ops/conv.h builds autograd on top).
//
// Layouts are PyTorch's: x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out];
// the output is [N, C_out, OH, OW] with OH = floor((H + 2 pad - dilation (kH - 1) - 1) / stride) + 1.
// f32 and bf16 run on oneDNN, f16 is computed in f32 and rounded once, f64 runs the reference
// loops (it exists for gradient checks). The oneDNN path reads channels-last inputs in place and
// reorders any other layout; the activations it returns (output, grad input) are channels-last
// (layout.h), the weight and bias gradients plain. The reference loops return plain NCHW.
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

// relu: max(0, .) applied to the output in the same pass (oneDNN's eltwise post-op), for the
// conv -> ReLU pairs of image models.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, bool relu = false);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p);
struct Conv2dWeightGrads { Tensor weight, bias; };  // bias undefined unless asked for
Conv2dWeightGrads conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                         bool with_bias, const Conv2dParams& p);

// Plain loops over every (output, input, weight) triple, accumulated in f64 and returned in the
// inputs' dtype: the definition the oneDNN path is tested against.
namespace reference {
// relu: max(0, .) applied to the output in the same pass (oneDNN's eltwise post-op), for the
// conv -> ReLU pairs of image models.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, bool relu = false);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p);
Conv2dWeightGrads conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                         bool with_bias, const Conv2dParams& p);
}  // namespace reference

}  // namespace weft::cpu
