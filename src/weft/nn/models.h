// The built-in classifiers that `weft train --model` names, laid out as nn.Sequential so their
// state-dict keys ("1.weight", "3.bias", ...) match the same models written in PyTorch.
//
// Each takes the input a ClassifierShape describes and returns [N, classes] logits. The default
// shape, [1, 28, 28] images in 10 classes (Fashion-MNIST, MNIST), builds exactly the models of
// earlier versions, parameter for parameter from the same generator, so their checkpoints load.
// The MLP also takes feature vectors ([F], a table's rows); the CNN takes images only.
#pragma once
#include <cstdint>
#include <memory>

#include "weft/core/shape.h"
#include "weft/nn/container.h"
#include "weft/nn/model_kind.h"

namespace weft::nn {

struct ClassifierShape {
  Shape input{1, 28, 28};  // one sample: [C, H, W] or [F]
  int64_t classes = 10;
};

// Flatten, numel(input)-512-256-classes with ReLU.
std::shared_ptr<Sequential> make_mlp(const ClassifierShape& shape = {});
// conv C→32 3×3, ReLU, maxpool 2, conv 32→64 3×3, ReLU, maxpool 2, flatten, fc 64·h·w→128, ReLU,
// fc 128→classes, where h = ((H - 2) / 2 - 2) / 2 rounded down (5 for 28) and w likewise.
// Images smaller than kCnnMinSide on a side, or a shape that is not [C, H, W] → ValueError.
std::shared_ptr<Sequential> make_cnn(const ClassifierShape& shape = {});
inline constexpr int64_t kCnnMinSide = 10;  // the smallest side that leaves the last pooling a pixel
// make_mlp or make_cnn; the GPT → ValueError (it is no image classifier).
std::shared_ptr<Sequential> make_image_classifier(ModelKind kind, const ClassifierShape& shape = {});

}  // namespace weft::nn
