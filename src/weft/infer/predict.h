// A classifier's answer for a batch of images: what `weft serve` runs for /v1/predict, here so that
// anything that loads a model through infer/load.h classifies the same way.
#pragma once
#include "weft/core/tensor.h"
#include "weft/infer/load.h"

namespace weft::infer {

// The class probabilities, f32 [N, classes] (the softmax of the model's logits in f32, whatever
// its dtype), of `inputs` as classifier_input makes them. Records nothing for autograd. A GPT →
// ValueError.
Tensor class_probabilities(const LoadedModel& loaded, const Tensor& inputs);

}  // namespace weft::infer
