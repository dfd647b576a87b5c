#include "weft/nn/models.h"

#include "weft/nn/layers.h"

namespace weft::nn {

namespace {

void check_shape(const ClassifierShape& shape) {
  WEFT_CHECK(!shape.input.empty() && numel(shape.input) > 0, ValueError, "classifier: expected a non-empty input ",
             "shape, got ", shape_str(shape.input));
  WEFT_CHECK(shape.classes >= 2, ValueError, "classifier: expected at least 2 classes, got ", shape.classes);
}

}  // namespace

std::shared_ptr<Sequential> make_mlp(const ClassifierShape& shape) {
  check_shape(shape);
  return std::make_shared<Sequential>(std::make_shared<Flatten>(), std::make_shared<Linear>(numel(shape.input), 512),
                                      std::make_shared<ReLU>(), std::make_shared<Linear>(512, 256),
                                      std::make_shared<ReLU>(), std::make_shared<Linear>(256, shape.classes));
}

std::shared_ptr<Sequential> make_cnn(const ClassifierShape& shape) {
  check_shape(shape);
  const Shape& in = shape.input;
  WEFT_CHECK(in.size() == 3 && in[1] >= kCnnMinSide && in[2] >= kCnnMinSide, ValueError, "cnn: takes images [C, H, W] ",
             "at least ", kCnnMinSide, "x", kCnnMinSide, " (its two 3x3 convolutions and 2x2 poolings), got ",
             shape_str(in), in.size() == 1 ? " (table rows: train the mlp on them)" : "");
  const auto after_features = [](int64_t side) { return ((side - 2) / 2 - 2) / 2; };
  const int64_t flat = 64 * after_features(in[1]) * after_features(in[2]);
  return std::make_shared<Sequential>(
      std::make_shared<Conv2d>(in[0], 32, 3), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(32, 64, 3), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Flatten>(), std::make_shared<Linear>(flat, 128), std::make_shared<ReLU>(),
      std::make_shared<Linear>(128, shape.classes));
}

std::shared_ptr<Sequential> make_image_classifier(ModelKind kind, const ClassifierShape& shape) {
  WEFT_CHECK(is_image_classifier(kind), ValueError, "make_image_classifier: ", model_kind_name(kind),
             " is not an image classifier (mlp or cnn)");
  return kind == ModelKind::mlp ? make_mlp(shape) : make_cnn(shape);
}

}  // namespace weft::nn
