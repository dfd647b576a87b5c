// The one training loop behind `weft train`, for every task (train/task.h): data, model,
// optimizer, schedule, precision, accumulation, auto-batch, clipping, time limit, evaluation,
// progress, TensorBoard and JSON-lines logs, checkpoints and resume.
//
// A run is a sequence of optimizer steps. Step s draws batch s % E of epoch s / E, where E is the
// task's steps per epoch (at most --limit-train-batches), from the task's sampler; evaluation
// (and, with --out, a checkpoint) follows every --eval-every steps and the last one.
//
// Determinism: with the same options (seed and thread count included) two runs produce
// bit-identical parameters. The seed fixes the initialisation (weft's default generator) and the
// batches (a function of seed and epoch), and every kernel weft runs reduces in a fixed order for
// a given thread count. A resumed run continues bit-identically from any checkpoint: the
// checkpoint holds weights, optimizer state, step and RNG state, the learning rate is a pure
// function of the step, and the loader starts mid-epoch at the step's batch.
#pragma once
#include <cstdint>
#include <ostream>

#include <nlohmann/json.hpp>

#include "weft/dist/process_group.h"
#include "weft/nn/module.h"
#include "weft/train/options.h"

namespace weft::train {

struct TrainResult {
  std::string model;
  int64_t params = 0;
  int64_t steps = 0;        // optimizer steps taken, resumed ones included
  int64_t start_step = 0;   // where this run began: the resumed checkpoint's step, else 0
  int64_t planned_steps = 0;
  int64_t items = 0;        // samples or tokens (the task's items) trained on in this run
  double train_loss = 0;    // mean per prediction over the last logging window
  double items_per_s = 0;   // training steps only (no evaluation, no checkpointing)
  double wall_s = 0;        // the whole call
  double final_evaluation_s = 0;  // the last evaluation and the save after it (0: stopped by a signal)
  int64_t peak_allocated_bytes = 0, peak_rss_bytes = 0;
  // The allocator's peak over the training loop, before the final evaluation and save (what weft
  // plan predicts; with --eval-every the loop's own evaluations are in it).
  int64_t steps_peak_allocated_bytes = 0;
  int64_t batch_size = 0;
  int64_t micro_batch = 0;  // at the end: smaller than batch / grad_accum after --auto-batch halved it
  int64_t skipped_steps = 0;  // fp16 steps skipped for inf/NaN gradients
  double loss_scale = 0;      // fp16: the final loss scale
  bool hit_time_limit = false;
  std::string stopped_by;     // "SIGTERM" or "SIGINT" when a signal stopped it early, else ""
  std::string items_name;     // "samples" | "tokens"
  nlohmann::json setup;       // how it trained: {"optimizer": "adamw", "precision": "bf16", "grad_accum": 1, ...}
  nlohmann::json task;        // what the task says of itself: {"layers": 4, "tokenizer": "byte"}
  nlohmann::json evaluation;  // the last evaluation: {"test_accuracy": 0.9, ...} or {"val_loss": 1.7, ...}
  std::string evaluation_line;
  // With --profile: {"trace", "first_step", "last_step", "step_ms" (the profiler's step scopes),
  // "measured_step_ms" (the trainer's clock over the same steps), "roofline", "ops" (key averages),
  // "families" (ms per step by op family, allocator and framework)}.
  nlohmann::json profile;

  // Every field above (setup, task and evaluation flattened in; profile under "profile"), as
  // `weft train --json` prints it.
  nlohmann::json to_json() const;
};

// A model of the caller's, trained in place of the one --model builds: weft.train.fit's, defined in
// Python. --model still chooses the task (its data, evaluation and defaults); the model must take
// that task's batches. `name` stands for the model wherever its kind would: the log, the run's
// result, the checkpoint's "weft.model" (so a resume or --init-from of a checkpoint of another
// model is refused). Its parameters are trained in place: the caller's handles see every update.
// Activation checkpointing and tensor or pipeline parallelism cut weft's own models, so they are
// refused; every data-parallel mode takes it (ZeRO-3 gathers its parameters for the whole forward).
struct CustomModel {
  std::shared_ptr<nn::Module> module;
  std::string name;
};

// Trains as `options` say, reporting progress on `log` (a redrawn bar when `interactive`, plain
// lines otherwise), data parallel over `group` when it has more than one rank (default: every rank
// of the launch; rank 0 of the group logs and writes), the model `custom`'s when given. Bad options
// → ValueError naming the flag.
TrainResult train(const TrainOptions& options, std::ostream& log, bool interactive,
                  dist::ProcessGroup& group = dist::ProcessGroup::world(), const CustomModel* custom = nullptr);

// The command that runs `weft train ARGS` the way this process was started: under mpirun with
// this launch's number of ranks when there is one (--oversubscribe when they outnumber the cores,
// --allow-run-as-root for root).
std::string train_command(const std::string& args);

}  // namespace weft::train
