#include "weft/nn/models.h"

#include "weft/nn/layers.h"

namespace weft::nn {

std::shared_ptr<Sequential> make_mlp() {
  return std::make_shared<Sequential>(std::make_shared<Flatten>(), std::make_shared<Linear>(784, 512),
                                      std::make_shared<ReLU>(), std::make_shared<Linear>(512, 256),
                                      std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10));
}

std::shared_ptr<Sequential> make_cnn() {
  return std::make_shared<Sequential>(
      std::make_shared<Conv2d>(1, 32, 3), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(32, 64, 3), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Flatten>(), std::make_shared<Linear>(1600, 128), std::make_shared<ReLU>(),
      std::make_shared<Linear>(128, 10));
}

std::shared_ptr<Sequential> make_image_classifier(ModelKind kind) {
  WEFT_CHECK(is_image_classifier(kind), ValueError, "make_image_classifier: ", model_kind_name(kind),
             " is not an image classifier (mlp or cnn)");
  return kind == ModelKind::mlp ? make_mlp() : make_cnn();
}

}  // namespace weft::nn
