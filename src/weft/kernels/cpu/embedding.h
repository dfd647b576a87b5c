// Embedding kernels: rows of a weight [V, D] gathered by i64 indices, and their gradient.
// The backward adds each index's rows in index order, so it is deterministic whatever the thread
// count; 16-bit gradients accumulate in f32 and round once.
#pragma once
#include "weft/core/tensor.h"

namespace weft::cpu {

// indices i64 of any shape (read through their strides), weight [V, D] -> indices.shape + [D].
// An index outside [0, V) → IndexError.
Tensor embedding(const Tensor& indices, const Tensor& weight);
// The weight's gradient [V, D] (grad_out's dtype, floating-point, else DTypeError):
// grad[indices[i], :] += grad_out[i, :] for every i; indices contiguous.
Tensor embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t V, int64_t D);
// The same rows added into `gathered` [V, D], a gradient of the weight that already arrived (a
// tied output projection's), bit for bit as adding embedding_backward's result to it. Only for
// f32 or f64 in gathered's dtype: false, and nothing written, otherwise.
bool embedding_backward_into(Tensor& gathered, const Tensor& grad_out, const Tensor& indices);

}  // namespace weft::cpu
