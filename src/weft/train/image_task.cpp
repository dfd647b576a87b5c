#include "weft/train/image_task.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "weft/autograd/grad_mode.h"
#include "weft/data/image_folder.h"
#include "weft/data/split.h"
#include "weft/data/table.h"
#include "weft/infer/metadata.h"
#include "weft/nn/models.h"
#include "weft/ops/loss.h"
#include "weft/train/step.h"
#include "weft/train/task.h"

namespace weft::train {

data::ImageDataset load_image_dataset(const std::string& dataset, const std::string& data_dir, bool train) {
  const infer::ImageDatasetInfo& info = infer::image_dataset_info(dataset);
  const std::string dir = infer::image_data_dir(dataset, data_dir);
  data::ImageDataset data = data::load_mnist_idx(dir, train, info.normalization);
  const Shape found(data.images().shape().begin() + 1, data.images().shape().end());
  WEFT_CHECK(found == info.sample_shape, FormatError, "--data-dir ", dir, ": expected ", dataset, " images of ",
             shape_str(info.sample_shape), " (what the models take), found ", shape_str(found), " in its ",
             train ? "train" : "t10k", "-images-idx3-ubyte");
  return data;
}

EvalResult evaluate_classifier(nn::Module& model, const data::Dataset& data, int64_t batch_size, const LossFn& loss,
                               const EvalProgress& progress) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<int64_t> indices;
  for (int64_t begin = 0; begin < data.size(); begin += batch_size) {
    indices.clear();
    for (int64_t i = begin; i < std::min(begin + batch_size, data.size()); ++i) indices.push_back(i);
    data::Batch batch = data.get_batch(indices);
    Tensor logits = model(batch.inputs);
    loss_sum += loss(logits, batch.targets).item();
    correct += count_correct(logits, batch.targets);
    if (progress) progress(begin / batch_size + 1, (data.size() + batch_size - 1) / batch_size);
  }
  model.train(was_training);
  EvalResult result;
  result.samples = data.size();
  result.accuracy = result.samples ? double(correct) / result.samples : 0;
  result.loss = result.samples ? loss_sum / result.samples : 0;
  return result;
}

namespace {

// The default recipe is the one that reached the classifiers' accuracy targets with --seed 0 on
// Fashion-MNIST: AdamW at 4e-3 with a cosine decay over the whole run gives the CNN 90.25% after
// 2 epochs (seeds 1 and 2: 89.76%, 90.00%) and the MLP 88.34% after 3. PyTorch's usual AdamW 1e-3
// gives 88.0% (PyTorch itself: 88.2%), and a per-epoch step decay at 4e-3 89.39%.
// Evaluation needs no gradients, so it runs in larger batches than training.
const TaskDefaults kImageDefaults{.epochs = 2, .batch_size = 128, .adam_lr = 4e-3, .sgd_lr = 0.1,
                                  .weight_decay = 0.01, .beta2 = 0.999, .clip_grad = 0, .warmup = 0,
                                  .eval_every = std::nullopt, .eval_batch = 1000};

std::string joined(const std::vector<std::string>& names, size_t at_most = 10) {
  std::string text;
  for (size_t i = 0; i < std::min(names.size(), at_most); ++i) text += str(i ? ", " : "", names[i]);
  return names.size() > at_most ? str(text, ", ... (", names.size(), " in all)") : text;
}

std::string numbers(const std::vector<float>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) {
    char number[32];
    std::snprintf(number, sizeof number, "%.4g", values[i]);
    text += str(i ? ", " : "", number);
  }
  return str("[", text, "]");
}

// Rows `rows` of `t` (dimension 0), contiguous.
Tensor rows_of(const Tensor& t, const std::vector<int64_t>& rows) {
  const Tensor source = t.contiguous_untracked();
  Shape shape = t.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, t.dtype());
  const size_t row_bytes = static_cast<size_t>(t.numel() / std::max<int64_t>(t.size(0), 1)) * dtype_size(t.dtype());
  const auto* from = static_cast<const char*>(source.data_ptr());
  auto* to = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(to + i * row_bytes, from + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
  return out;
}

// What the task trains and is judged on, whichever the source.
struct ClassifierData {
  std::shared_ptr<const data::Dataset> train, test;
  Tensor test_labels;
  nn::ClassifierShape shape;
  infer::Metadata metadata;  // what inference needs, besides the class distribution
  std::string description;   // for the log
};

ClassifierData builtin_data(const ImageOptions& o) {
  auto train = std::make_shared<data::ImageDataset>(load_image_dataset(o.dataset, o.data_dir, true));
  auto test = std::make_shared<data::ImageDataset>(load_image_dataset(o.dataset, o.data_dir, false));
  return {.train = train,
          .test = test,
          .test_labels = test->labels(),
          .shape = {},
          .metadata = infer::classifier_metadata(o.dataset),
          .description = ""};
}

std::string held_out_text(const ImageOptions& o) {
  char percent[32];
  std::snprintf(percent, sizeof percent, "%g%%", 100 * o.val_fraction.value_or(ImageOptions::kDefaultValFraction));
  return str(percent, " of each class, drawn by --seed");
}

ClassifierData image_folder_data(const ImageOptions& o, uint64_t seed) {
  data::ImageFormat format{.channels = o.channels,
                           .height = o.image_size.empty() ? 0 : o.image_size[0],
                           .width = o.image_size.empty() ? 0 : o.image_size[1]};
  Tensor train_images, train_labels, test_images, test_labels;
  data::ImageFolderListing listing;
  std::string held_out;
  int64_t skipped = 0;
  if (const auto folders = data::train_test_folders(o.data)) {
    listing = data::list_image_folder(folders->first);
    const data::ImageFolderListing test = data::list_image_folder(folders->second, listing.classes);
    train_images = data::read_images(listing.files, format);
    test_images = data::read_images(test.files, format);
    train_labels = Tensor::from_vector(listing.labels, {std::ssize(listing.labels)});
    test_labels = Tensor::from_vector(test.labels, {std::ssize(test.labels)});
    held_out = str(test.files.size(), " held out in ", folders->second);
    skipped = listing.skipped + test.skipped;
  } else {
    listing = data::list_image_folder(o.data);
    const Tensor images = data::read_images(listing.files, format);
    const Tensor labels = Tensor::from_vector(listing.labels, {std::ssize(listing.labels)});
    const data::Split split = data::split_per_class(listing.labels, std::ssize(listing.classes),
                                                    o.val_fraction.value_or(ImageOptions::kDefaultValFraction), seed);
    train_images = rows_of(images, split.train);
    train_labels = rows_of(labels, split.train);
    test_images = rows_of(images, split.held_out);
    test_labels = rows_of(labels, split.held_out);
    held_out = str(split.held_out.size(), " held out (", held_out_text(o), ")");
    skipped = listing.skipped;
  }
  const Shape sample{format.channels, format.height, format.width};
  data::Normalization normalization;
  if (o.normalize.empty()) {
    normalization = data::measure_normalization(train_images);
  } else {
    const size_t half = o.normalize.size() / 2;
    WEFT_CHECK(std::ssize(o.normalize) == 2 * format.channels, ValueError, "--normalize: ", half, " channel",
               half == 1 ? "" : "s", "' statistics for images of ", format.channels, " channels (--channels ",
               format.channels, ")");
    normalization.mean.assign(o.normalize.begin(), o.normalize.begin() + static_cast<std::ptrdiff_t>(half));
    normalization.std.assign(o.normalize.begin() + static_cast<std::ptrdiff_t>(half), o.normalize.end());
  }
  ClassifierData d;
  d.train = std::make_shared<data::ImageDataset>(train_images, train_labels, normalization);
  d.test = std::make_shared<data::ImageDataset>(test_images, test_labels, normalization);
  d.test_labels = test_labels;
  d.shape = {.input = sample, .classes = std::ssize(listing.classes)};
  d.metadata = infer::image_folder_metadata(listing.classes, sample, normalization);
  d.description = str("data: ", o.data, ": ", listing.classes.size(), " classes (", joined(listing.classes), "), ",
                      train_images.size(0), " training images ", format.channels, "x", format.height, "x", format.width,
                      ", ", held_out, skipped ? str("; skipped ", skipped, skipped == 1 ? " file" : " files", " not .png, .jpg or .jpeg") : "",
                      "\nnormalisation: mean ", numbers(normalization.mean), ", std ", numbers(normalization.std),
                      o.normalize.empty() ? " (measured over the training images)" : " (--normalize)", "\n");
  return d;
}

ClassifierData table_data(const ImageOptions& o, uint64_t seed) {
  data::Table table = data::read_csv_table(o.data, {.label = o.label_column, .features = {}, .classes = {}});
  const std::vector<int64_t> labels = table.labels.to_vector<int64_t>();
  const data::Split split = data::split_per_class(labels, std::ssize(table.classes),
                                                  o.val_fraction.value_or(ImageOptions::kDefaultValFraction), seed);
  const Tensor train_values = rows_of(table.values, split.train), test_values = rows_of(table.values, split.held_out);
  const Tensor test_labels = rows_of(table.labels, split.held_out);
  infer::TableSchema schema{.label = table.label, .features = table.features, .classes = table.classes,
                            .standardization = data::measure_standardization(train_values)};
  ClassifierData d;
  d.train = std::make_shared<data::TableDataset>(train_values, rows_of(table.labels, split.train), schema.standardization);
  d.test = std::make_shared<data::TableDataset>(test_values, test_labels, schema.standardization);
  d.test_labels = test_labels;
  d.shape = {.input = {std::ssize(table.features)}, .classes = std::ssize(table.classes)};
  d.metadata = infer::table_metadata(schema);
  d.description = str("data: ", o.data, ": ", table.classes.size(), " classes of '", table.label, "' (",
                      joined(table.classes), "), ", table.features.size(), " features (", joined(table.features), "), ",
                      split.train.size(), " training rows, ", split.held_out.size(), " held out (", held_out_text(o),
                      "); features standardised by the training rows' mean and std\n");
  return d;
}

ClassifierData classifier_data(const TrainOptions& o) {
  if (!o.image.own_data()) return builtin_data(o.image);
  return o.image.is_table() ? table_data(o.image, o.seed) : image_folder_data(o.image, o.seed);
}

class ImageTask : public Task {
 public:
  ImageTask(const TrainOptions& o, std::ostream& log) : model_(o.model), data_(classifier_data(o)) {
    log << data_.description;
  }

  const TaskDefaults& defaults() const override { return kImageDefaults; }
  int64_t eval_samples() const override { return data_.test->size(); }
  std::shared_ptr<nn::Module> make_model(bool checkpoint_activations) const override {
    auto model = nn::make_image_classifier(model_, data_.shape);
    if (checkpoint_activations)
      model->set_checkpoint_segments(std::llround(std::sqrt(static_cast<double>(model->size()))));
    return model;
  }
  std::shared_ptr<const data::Dataset> train_data() const override { return data_.train; }
  // Across ranks, DistributedSampler deals out the one-process permutation: rank r's batch k holds
  // the same samples as the r-th slice of the one-process batch k, interleaved.
  std::shared_ptr<const data::Sampler> train_sampler(int64_t, uint64_t seed, int rank, int world) const override {
    const int64_t size = data_.train->size();
    if (world > 1) return std::make_shared<data::DistributedSampler>(size, rank, world, /*shuffle=*/true, seed);
    return std::make_shared<data::RandomSampler>(size, seed);
  }
  const char* items() const override { return "samples"; }
  bool tallies_accuracy() const override { return true; }

  // The input's description travels with the weights, so inference needs no dataset (infer/load.h).
  std::map<std::string, std::string> checkpoint_metadata() const override {
    infer::Metadata metadata = data_.metadata;
    metadata.merge(infer::class_distribution_metadata(data_.test_labels, data_.shape.classes));
    return metadata;
  }

  Evaluation evaluate(nn::Module& model, int64_t batch_size, const LossFn& loss,
                      const EvalProgress& progress) const override {
    EvalResult r = evaluate_classifier(model, *data_.test, batch_size, loss, progress);
    char line[96];
    std::snprintf(line, sizeof line, "test accuracy %.2f%% (loss %.4g)", 100 * r.accuracy, r.loss);
    return {.loss = r.loss,
            .scalars = {{"test/accuracy", r.accuracy}, {"test/loss", r.loss}},
            .result = {{"test_accuracy", r.accuracy}, {"test_loss", r.loss}},
            .line = line};
  }

 private:
  nn::ModelKind model_;
  ClassifierData data_;
};

}  // namespace

std::shared_ptr<const data::Dataset> own_evaluation_data(const infer::LoadedModel& loaded, const std::string& data) {
  if (loaded.table) {
    const data::Table table = data::read_csv_table(
        data, {.label = loaded.table->label, .features = loaded.table->features, .classes = loaded.table->classes});
    return std::make_shared<data::TableDataset>(table.values, table.labels, loaded.table->standardization);
  }
  const auto folders = data::train_test_folders(data);
  const data::ImageFolderListing listing = data::list_image_folder(folders ? folders->second : data, loaded.labels);
  const Shape& sample = loaded.input_shape;
  data::ImageFormat format{.channels = sample[0], .height = sample[1], .width = sample[2]};
  return std::make_shared<data::ImageDataset>(data::read_images(listing.files, format),
                                              Tensor::from_vector(listing.labels, {std::ssize(listing.labels)}),
                                              loaded.normalization);
}

const TaskDefaults& image_task_defaults() { return kImageDefaults; }

std::unique_ptr<Task> make_image_task(const TrainOptions& o, std::ostream& log) {
  return std::make_unique<ImageTask>(o, log);
}

}  // namespace weft::train
