// Reductions over dimensions (not differentiable; see ops/reduce.h).
//
// sum and max reduce any set of dims; the result keeps reduced dims as size 1 when keepdim.
// f16 / bf16 accumulate in f32, f32 in f32 with vector lanes, f64 in f64. max also returns the
// flat index (within the reduced sub-block, row-major) of the first maximum, which its backward
// scatters into. sum_to reduces a broadcast result back to an input's shape.
#pragma once
#include <vector>

#include "weft/core/tensor.h"

namespace weft::cpu {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
struct MaxResult { Tensor values, indices; };  // indices: i64
MaxResult max(const Tensor& x, int64_t dim, bool keepdim);
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor argmax(const Tensor& x, int64_t dim);  // i64, dim removed

namespace reference {
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
}

}  // namespace weft::cpu
