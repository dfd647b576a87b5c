// Task: what the one trainer (train/trainer.h) learns, from what, and how it is judged — the
// model, the training data and the order it is drawn in, and the evaluation. Everything else
// (precision, accumulation, checkpointing of activations, auto-batch, schedules, clipping, time
// limit, resume, checkpoints, metrics, progress, the result) is the trainer's, written once.
//
// Two tasks exist: image classification (--model mlp | cnn, train/image_task.cpp) and language
// modelling (--model gpt, train/language_task.cpp). Both train on cross-entropy over the model's
// last dimension, one prediction per target: [N, classes] for targets [N], [N, T, vocab] for [N, T]
// (train/step.h). A batch's "items" are its predictions: samples for a classifier, tokens for a
// language model, and throughput is counted in them.
//
// Invariant: the batches of step s depend only on the options and s (the sampler is a pure
// function of seed and epoch, data::Sampler), so a run resumed at any step continues exactly.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/data/dataset.h"
#include "weft/data/sampler.h"
#include "weft/dist/forward_backward.h"
#include "weft/nn/module.h"
#include "weft/train/options.h"

namespace weft::train {

using dist::LossFn;
Tensor summed_cross_entropy(const Tensor& outputs, const Tensor& targets);

// What a task chooses when the user did not.
struct TaskDefaults {
  double epochs = 1;
  int64_t batch_size = 1;
  double adam_lr = 1e-3, sgd_lr = 0.1;  // adam and adamw; sgd and momentum
  double weight_decay = 0.01;  // adamw's
  double beta2 = 0.999;        // adam and adamw
  double clip_grad = 0;        // 0: off
  std::optional<int64_t> warmup;      // nullopt: 10% of the steps, at most 100
  std::optional<int64_t> eval_every;  // nullopt: at the end of every epoch
  int64_t eval_batch = 0;             // samples per evaluation batch; 0: the training batch size
};

// Called after each evaluation batch with the batches done and their total, for a progress bar.
using EvalProgress = std::function<void(int64_t batches_done, int64_t batches)>;

struct Evaluation {
  double loss = 0;         // mean cross-entropy on the held-out data: a non-finite one stops the run
  nlohmann::json scalars;  // for the metrics log: {"test/accuracy": 0.9, ...}
  nlohmann::json result;   // for the run's result: {"test_accuracy": 0.9, ...}
  std::string line;        // for a person: "test accuracy 90.25%, loss 0.27"
};

class Task {
 public:
  virtual ~Task() = default;

  virtual const TaskDefaults& defaults() const = 0;
  // Builds the model from weft's default generator (seeded by the trainer just before).
  virtual std::shared_ptr<nn::Module> make_model(bool checkpoint_activations) const = 0;

  virtual std::shared_ptr<const data::Dataset> train_data() const = 0;
  // The order of each epoch's samples for batches of `batch_size`; its size() over batch_size
  // (rounded up) is the epoch's number of steps. Under data parallelism (`world` > 1, batch_size
  // the global batch) rank `rank`'s share, batches of batch_size / world that together make the
  // one-process batches.
  virtual std::shared_ptr<const data::Sampler> train_sampler(int64_t batch_size, uint64_t seed, int rank = 0,
                                                             int world = 1) const = 0;
  virtual const char* items() const = 0;  // "samples" | "tokens"
  // Whether the step counts correct predictions (an argmax over every class: affordable for ten
  // classes, a visible part of the step for a vocabulary).
  virtual bool tallies_accuracy() const = 0;

  // The held-out data, in batches of `batch_size` samples, under NoGradGuard and eval mode, its
  // loss measured with `loss` (the one training uses).
  virtual Evaluation evaluate(nn::Module& model, int64_t batch_size, const LossFn& loss,
                              const EvalProgress& progress) const = 0;
  // How many samples evaluate() takes, to price an evaluation before it runs (--time-limit).
  virtual int64_t eval_samples() const = 0;

  // What a reader needs besides the weights, kept in model.safetensors' metadata.
  virtual std::map<std::string, std::string> checkpoint_metadata() const { return {}; }
  // Files saved beside the checkpoint (a SentencePiece model).
  virtual void save_files(const std::string& dir) const {}
  // What the run's result says about the task: {"layers": 4, "tokenizer": "byte", ...}.
  virtual nlohmann::json describe() const { return nlohmann::json::object(); }
};

// The task --model names, with its data loaded, its own options checked (ValueError naming the
// flag) and its description written to `log`.
std::unique_ptr<Task> make_task(const TrainOptions& options, std::ostream& log);
std::unique_ptr<Task> make_image_task(const TrainOptions& options, std::ostream& log);
std::unique_ptr<Task> make_language_task(const TrainOptions& options, std::ostream& log);

// The defaults of --model's task (its defaults()), known before any data is read, so that the
// flags are checked against them first.
const TaskDefaults& task_defaults(nn::ModelKind model);
const TaskDefaults& image_task_defaults();
const TaskDefaults& language_task_defaults();

}  // namespace weft::train
