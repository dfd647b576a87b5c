// Image classification, the task behind `weft train --model mlp | cnn` (train/task.h), and the
// pieces `weft eval` and `weft quantize` share with it: the IDX data and the test-set accuracy.
#pragma once
#include <cstdint>
#include <string>

#include "weft/data/dataset.h"
#include "weft/nn/module.h"
#include "weft/train/task.h"

namespace weft::train {

// The IDX test or training split in `data_dir` ("": the data set's own, infer::image_data_dir),
// normalised for `dataset` (ValueError if unknown); images of another size than the data set's,
// which the models cannot take → FormatError.
data::ImageDataset load_image_dataset(const std::string& dataset, const std::string& data_dir, bool train);

struct EvalResult {
  double accuracy = 0, loss = 0;  // fraction correct; mean cross-entropy
  int64_t samples = 0;
};
EvalResult evaluate_classifier(nn::Module& model, const data::Dataset& data, int64_t batch_size = 1000,
                               const LossFn& loss = summed_cross_entropy, const EvalProgress& progress = {});

}  // namespace weft::train
