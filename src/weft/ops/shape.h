// The reshape family and joins, differentiable. Views (Tensor::view, transpose, permute, narrow,
// slice, select, expand, squeeze, unsqueeze, flatten; declared in core/tensor.h) share storage;
// their backward maps the gradient back onto the input's shape. cat / stack / split copy.
#pragma once
#include <vector>

#include "weft/core/tensor.h"

namespace weft {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);
// Pieces of `sizes[i]` along dim; they are views of x (like torch.split).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> split(const Tensor& x, int64_t piece, int64_t dim);  // equal pieces, last smaller

}  // namespace weft
