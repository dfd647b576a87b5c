#include "weft/train/image_task.h"

#include <cmath>
#include <cstdio>

#include "weft/autograd/grad_mode.h"
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

class ImageTask : public Task {
 public:
  ImageTask(const TrainOptions& o)
      : model_(o.model),
        dataset_(o.image.dataset),
        train_(std::make_shared<data::ImageDataset>(load_image_dataset(o.image.dataset, o.image.data_dir, true))),
        test_(load_image_dataset(o.image.dataset, o.image.data_dir, false)) {}

  const TaskDefaults& defaults() const override { return kImageDefaults; }
  int64_t eval_samples() const override { return test_.size(); }
  std::shared_ptr<nn::Module> make_model(bool checkpoint_activations) const override {
    auto model = nn::make_image_classifier(model_);
    if (checkpoint_activations)
      model->set_checkpoint_segments(std::llround(std::sqrt(static_cast<double>(model->size()))));
    return model;
  }
  std::shared_ptr<const data::Dataset> train_data() const override { return train_; }
  // Across ranks, DistributedSampler deals out the one-process permutation: rank r's batch k holds
  // the same samples as the r-th slice of the one-process batch k, interleaved.
  std::shared_ptr<const data::Sampler> train_sampler(int64_t, uint64_t seed, int rank, int world) const override {
    if (world > 1) return std::make_shared<data::DistributedSampler>(train_->size(), rank, world, /*shuffle=*/true, seed);
    return std::make_shared<data::RandomSampler>(train_->size(), seed);
  }
  const char* items() const override { return "samples"; }
  bool tallies_accuracy() const override { return true; }

  // The normalisation travels with the weights, so inference needs no dataset (infer/load.h).
  std::map<std::string, std::string> checkpoint_metadata() const override {
    infer::Metadata metadata = infer::classifier_metadata(dataset_);
    metadata.merge(infer::class_distribution_metadata(
        test_.labels(), static_cast<int64_t>(infer::image_dataset_info(dataset_).labels.size())));
    return metadata;
  }

  Evaluation evaluate(nn::Module& model, int64_t batch_size, const LossFn& loss,
                      const EvalProgress& progress) const override {
    EvalResult r = evaluate_classifier(model, test_, batch_size, loss, progress);
    char line[96];
    std::snprintf(line, sizeof line, "test accuracy %.2f%% (loss %.4g)", 100 * r.accuracy, r.loss);
    return {.loss = r.loss,
            .scalars = {{"test/accuracy", r.accuracy}, {"test/loss", r.loss}},
            .result = {{"test_accuracy", r.accuracy}, {"test_loss", r.loss}},
            .line = line};
  }

 private:
  nn::ModelKind model_;
  std::string dataset_;
  std::shared_ptr<data::ImageDataset> train_;
  data::ImageDataset test_;
};

}  // namespace

const TaskDefaults& image_task_defaults() { return kImageDefaults; }

std::unique_ptr<Task> make_image_task(const TrainOptions& o, std::ostream&) { return std::make_unique<ImageTask>(o); }

}  // namespace weft::train
