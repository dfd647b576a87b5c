// The training loop behind `weft train` for the built-in image classifiers: data, model,
// optimizer, schedule, progress, TensorBoard and JSON-lines logs, checkpoints, resume.
//
// Determinism: with the same options (seed and thread count included) two runs produce
// bit-identical parameters. The seed fixes the initialisation (weft's default generator) and
// the shuffle (a function of seed and epoch), and every kernel weft runs reduces in a fixed
// order for a given thread count. A resumed run continues bit-identically too: the checkpoint
// holds weights, optimizer state, step, epoch and RNG state, and the learning rate is a pure
// function of the step.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/data/dataset.h"
#include "weft/nn/module.h"

namespace weft::train {

struct ClassifierOptions {
  std::string model = "cnn";  // mlp | cnn
  int64_t epochs = 2;
  int64_t batch_size = 128;
  std::string optimizer = "adamw";  // adamw | sgd
  double lr = 0;                    // 0: the optimizer's default (adamw 1e-3, sgd 0.05 with momentum 0.9)
  std::string schedule = "step";    // constant | step (x0.5 each epoch) | cosine (over all epochs)
  uint64_t seed = 0;
  int threads = 0;  // 0: leave weft's default
  std::string dataset = "fashion-mnist";  // fashion-mnist | mnist: which normalisation statistics apply
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string out_dir;     // "" : no checkpoint or logs
  std::string resume_dir;  // "" : start fresh
  int64_t limit_train_batches = 0;  // 0: every batch; otherwise the first N of each epoch
  int64_t log_every = 50;           // steps between log records (TensorBoard, metrics.jsonl, plain progress)
  int prefetch = 2;                 // batches the loader prepares ahead in the background

  nlohmann::json to_json() const;
};

struct TrainResult {
  int64_t params = 0;
  int64_t steps = 0;
  double test_accuracy = 0, test_loss = 0;
  double train_samples_per_s = 0;  // training steps only (no evaluation, no checkpointing)
  double wall_s = 0;               // the whole command
  int64_t peak_allocated_bytes = 0, peak_rss_bytes = 0;
};

// Trains, evaluates on the test set, writes checkpoint and logs to out_dir, reports progress on
// `log` (a redrawn bar when `interactive`, plain lines otherwise). Bad options → ValueError.
TrainResult train_classifier(const ClassifierOptions& options, std::ostream& log, bool interactive);

struct EvalResult {
  double accuracy = 0, loss = 0;  // fraction correct; mean cross-entropy
  int64_t samples = 0;
};
// The IDX test or training split in `dir`, normalised for `dataset` (ValueError if unknown).
data::ImageDataset load_image_dataset(const std::string& dataset, const std::string& dir, bool train);

EvalResult evaluate_classifier(nn::Module& model, const data::Dataset& data, int64_t batch_size = 1000);

}  // namespace weft::train
