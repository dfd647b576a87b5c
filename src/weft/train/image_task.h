// Classification, the task behind `weft train --model mlp | cnn` (train/task.h), and the pieces
// `weft eval` and `weft quantize` share with it: the data and the test-set accuracy.
//
// The data is a built-in data set's IDX files (--dataset, --data-dir) or the user's own (--data):
// a folder of images, one subfolder per class (data/image_folder.h), or a CSV table
// (data/table.h). Own data is evaluated on its held-out part: a folder's train/ and test/ (or
// val/) when it has them, else --val-fraction of each class drawn by --seed (data/split.h). The
// images' size, channels and normalisation (measured over the training images unless
// --normalize), or the table's columns and standardisation (the training rows'), and the class
// names are saved in the checkpoint (infer/metadata.h), so that a model is evaluated, served and
// loaded without the data it was trained on.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "weft/data/dataset.h"
#include "weft/infer/load.h"
#include "weft/nn/module.h"
#include "weft/train/task.h"

namespace weft::train {

// The IDX test or training split in `data_dir` ("": the data set's own, infer::image_data_dir),
// normalised for `dataset` (ValueError if unknown); images of another size than the data set's,
// which the models cannot take → FormatError.
data::ImageDataset load_image_dataset(const std::string& dataset, const std::string& data_dir, bool train);

// The data a classifier trained on the user's own data (loaded.dataset image-folder or table) is
// evaluated on: a folder's test/ (or val/) when it has train/ and test/, else every image in
// `data`, read at the checkpoint's size, channels and normalisation; or every row of a table,
// standardised as in training. The class folders and labels must be among the model's classes.
std::shared_ptr<const data::Dataset> own_evaluation_data(const infer::LoadedModel& loaded, const std::string& data);

struct EvalResult {
  double accuracy = 0, loss = 0;  // fraction correct; mean cross-entropy
  int64_t samples = 0;
};
EvalResult evaluate_classifier(nn::Module& model, const data::Dataset& data, int64_t batch_size = 1000,
                               const LossFn& loss = summed_cross_entropy, const EvalProgress& progress = {});

}  // namespace weft::train
