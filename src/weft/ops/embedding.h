// Embedding lookup: rows of weight [num_embeddings, dim] picked by i64 indices of any shape.
#pragma once
#include "weft/core/tensor.h"

namespace weft {

Tensor embedding(const Tensor& indices, const Tensor& weight);  // -> indices.shape + [dim]

}  // namespace weft
