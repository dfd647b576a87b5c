// The built-in image classifiers that `weft train --model` names, laid out as nn.Sequential so
// their state-dict keys ("1.weight", "3.bias", ...) match the same models written in PyTorch.
// Both take [N, 1, 28, 28] images and return [N, 10] logits.
#pragma once
#include <memory>

#include "weft/nn/container.h"
#include "weft/nn/model_kind.h"

namespace weft::nn {

// Flatten, 784-512-256-10 with ReLU.
std::shared_ptr<Sequential> make_mlp();
// conv 1→32 3×3, ReLU, maxpool 2, conv 32→64 3×3, ReLU, maxpool 2, flatten, fc 1600→128, ReLU, fc 128→10.
std::shared_ptr<Sequential> make_cnn();
// make_mlp or make_cnn; the GPT → ValueError (it is no image classifier).
std::shared_ptr<Sequential> make_image_classifier(ModelKind kind);

}  // namespace weft::nn
