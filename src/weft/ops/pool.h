// 2-d pooling over NCHW tensors (oneDNN for f32 / bf16, reference loops for f64).
#pragma once
#include <array>

#include "weft/core/tensor.h"

namespace weft {

struct Pool2dOptions {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0 = same as kernel (PyTorch's default)
  std::array<int64_t, 2> padding{0, 0};

  std::array<int64_t, 2> effective_stride() const {
    return {stride[0] != 0 ? stride[0] : kernel[0], stride[1] != 0 ? stride[1] : kernel[1]};
  }
};

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);  // padding counted (count_include_pad)
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

}  // namespace weft
