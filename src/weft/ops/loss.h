// Losses. Reductions follow PyTorch: "mean" over the counted elements, "sum", or "none".
#pragma once
#include "weft/core/tensor.h"

namespace weft {

enum class Reduction { mean, sum, none };

// logits [N, C] (or [N, C, d1...]), target i64 [N] (or [N, d1...]) class indices. Targets equal to
// ignore_index contribute nothing and are not counted by the mean. label_smoothing as PyTorch.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace weft
