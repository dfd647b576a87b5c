// Parameter initialisers, as torch.nn.init. Each fills `t` in place (not recorded by autograd),
// draws from `gen` so a seeded run is reproducible, and returns t.
#pragma once
#include "weft/core/random.h"
#include "weft/core/tensor.h"

namespace weft::nn::init {

// fan_in = size(1) * receptive field (the product of dims 2..); a weight needs at least 2 dims.
int64_t fan_in(const Tensor& weight);

Tensor uniform_(Tensor t, double low, double high, Generator& gen = default_generator());
Tensor normal_(Tensor t, double mean = 0, double std = 1, Generator& gen = default_generator());
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);
// U(-bound, bound) with bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)) (leaky ReLU,
// fan_in mode). PyTorch's default for Linear and Conv weights is a = sqrt(5): bound = 1/sqrt(fan_in).
Tensor kaiming_uniform_(Tensor t, double a = 0, Generator& gen = default_generator());

}  // namespace weft::nn::init
