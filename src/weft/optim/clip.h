// Gradient clipping by total norm, as torch.nn.utils.clip_grad_norm_.
#pragma once
#include <vector>

#include "weft/core/tensor.h"

namespace weft::optim {

// Computes the norm of all the params' grads taken together (as one concatenated vector;
// norm_type p > 0, or INFINITY for the max-abs norm), accumulating in f64, and returns it.
// Grads are then scaled in place by max_norm / (total + 1e-6) when that factor is below 1.
// Params without a grad are ignored (none at all: returns 0). Like PyTorch's default
// (error_if_nonfinite=False), a non-finite total still scales: an inf norm zeroes the finite
// grads, a NaN norm makes them NaN; callers that must skip such steps check the result.
// Negative max_norm or a norm_type <= 0 → ValueError.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace weft::optim
