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
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/amp/grad_scaler.h"

#include "weft/data/dataset.h"
#include "weft/nn/module.h"
#include "weft/train/step.h"

namespace weft::train {

struct ClassifierOptions {
  std::string model = "cnn";  // mlp | cnn
  int64_t epochs = 2;
  int64_t batch_size = 128;
  // The default recipe is the one that reached issue 3's targets with --seed 0, measured on
  // Fashion-MNIST: AdamW at 4e-3 with a cosine decay over the whole run gives the CNN 90.25% after
  // 2 epochs (seeds 1 and 2: 89.76%, 90.00%) and the MLP 88.34% after 3. PyTorch's usual AdamW 1e-3
  // gives 88.0% (PyTorch itself: 88.2%), and a per-epoch step decay at 4e-3 89.39%.
  std::string optimizer = "adamw";  // adamw | sgd
  double lr = 0;                    // 0: the optimizer's default (adamw 4e-3, sgd 0.1 with momentum 0.9)
  // constant | step (x0.5 each epoch) | cosine (to zero at the end of --epochs). Cosine's horizon is
  // the run's --epochs, so resuming with a larger --epochs re-plans it (the rate rises again);
  // constant and step depend only on the step, so a run extended by resuming equals a longer run.
  std::string schedule = "cosine";
  uint64_t seed = 0;
  int threads = 0;  // 0: leave weft's default
  std::string dataset = "fashion-mnist";  // fashion-mnist | mnist: which normalisation statistics apply
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string out_dir;     // "" : no checkpoint or logs
  std::string resume_dir;  // "" : start fresh
  int64_t limit_train_batches = 0;  // 0: every batch; otherwise the first N of each epoch
  int64_t log_every = 50;           // steps between log records (TensorBoard, metrics.jsonl, plain progress)
  int prefetch = 2;                 // batches the loader prepares ahead in the background

  // Precision and memory (docs/mixed-precision.md). fp32 | bf16 | fp16: bf16 and fp16 run the
  // forward under autocast with f32 master weights (the parameters stay f32 and the optimizer
  // updates them); fp16 adds dynamic loss scaling (amp::GradScaler).
  std::string precision = "fp32";
  int64_t grad_accum = 1;               // micro-batches per step; must divide batch_size
  bool checkpoint_activations = false;  // the model's Sequential in round(sqrt(layers)) segments
  bool auto_batch = false;  // on OutOfMemoryError: halve the micro-batch, redo the step (and evaluation)
  int64_t memory_limit = 0; // bytes the allocator may hold; 0 leaves WEFT_MEMORY_LIMIT or none

  nlohmann::json to_json() const;
};

struct TrainResult {
  int64_t params = 0;
  int64_t steps = 0;
  double test_accuracy = 0, test_loss = 0;
  double train_samples_per_s = 0;  // training steps only (no evaluation, no checkpointing)
  double wall_s = 0;               // the whole command
  int64_t peak_allocated_bytes = 0, peak_rss_bytes = 0;
  int64_t micro_batch = 0;      // at the end: smaller than batch_size / grad_accum after --auto-batch halved it
  int64_t skipped_steps = 0;    // fp16 steps skipped for inf/NaN gradients
  double loss_scale = 0;        // fp16: the final loss scale
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
