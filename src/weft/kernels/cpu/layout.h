// Channels-last activations: an NCHW shape over NHWC memory (strides [H W C, 1, W C, C]), a stride
// permutation that weft's views and elementwise loops already handle (elementwise results keep
// it). It is the layout oneDNN's convolution and pooling kernels read and write natively, so
// convolutions produce it and pooling keeps it: a conv -> relu -> pool -> conv chain runs
// without a reorder between ops. oneDNN's own blocked formats (nChw16c) are as fast for the
// convolutions themselves but would need an opaque tensor kind that no other op could read.
#pragma once
#include "weft/core/tensor.h"

namespace weft::cpu {

Tensor empty_channels_last(const Shape& nchw, DType dtype);
bool is_channels_last(const Tensor& t);  // rank 4 and dense NHWC memory; size-1 dims' strides are free

}  // namespace weft::cpu
