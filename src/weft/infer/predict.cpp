#include "weft/infer/predict.h"

#include "weft/autograd/grad_mode.h"
#include "weft/ops/activation.h"

namespace weft::infer {

Tensor class_probabilities(const LoadedModel& loaded, const Tensor& inputs) {
  WEFT_CHECK(!loaded.gpt, ValueError, "class_probabilities: ", loaded.file, " holds a GPT, which has no classes");
  NoGradGuard no_grad;
  const Tensor logits = (*loaded.model)(inputs);
  return softmax(Tensor::empty(logits.shape(), DType::f32).copy_(logits), -1);
}

}  // namespace weft::infer
