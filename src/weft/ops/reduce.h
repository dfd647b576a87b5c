// Differentiable reductions. An empty dims list reduces over every dim (to a 0-d tensor unless keepdim).
#pragma once
#include <vector>

#include "weft/core/tensor.h"

namespace weft {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Maximum along one dim; the gradient goes to the first maximal element.
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor argmax(const Tensor& x, int64_t dim);  // i64, not differentiable

}  // namespace weft
