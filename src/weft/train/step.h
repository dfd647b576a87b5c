// One optimizer step, as the trainer (train/trainer.h) takes it for every task: forward and
// backward in micro-batches under autocast, --auto-batch's retry on out-of-memory, the update
// through fp16's loss scaler, and the metrics log.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/amp/grad_scaler.h"
#include "weft/amp/precision.h"
#include "weft/data/dataset.h"
#include "weft/dist/ddp.h"
#include "weft/dist/forward_backward.h"
#include "weft/io/tensorboard.h"
#include "weft/nn/module.h"
#include "weft/optim/clip.h"
#include "weft/optim/optimizer.h"
#include "weft/train/task.h"

namespace weft::train {

// What the trainer runs: fp32, bf16 and fp16, not bf16-pure (which the planner prices) →
// ValueError. Where oneDNN only emulates bf16, or has no bf16 kernels at all (below AVX-512: weft
// widens to f32 then), both slower than fp32, says so on `log`.
void check_precision(amp::Precision precision, std::ostream& log);

// How many rows of logits [N, C] have their argmax at targets [N].
int64_t count_correct(const Tensor& logits, const Tensor& targets);

using dist::StepTally;
// Forward and backward of one batch in micro-batches of `micro_batch` samples (rows of
// batch.inputs), under autocast to `low_precision` when given, the loss scaled by `scaler` when
// given. The model's output is [..., classes] with one prediction per target: [N, classes] for
// targets [N], [N, T, vocab] for targets [N, T]. Each micro-batch's loss is its summed
// cross-entropy divided by the whole batch's number of predictions, so the accumulated gradients
// are those of the batch's mean loss however it is cut. The optimizer step is the caller's.
// `tally_correct` counts correct predictions: an argmax over every class, which a language
// model's vocabulary makes a visible part of the step, so it does not ask. `grad_norm`, when
// given, is armed before the last micro-batch's backward, so that it reads the final gradients as
// they become ready. `sync`, when given (DDP, ZeRO), is told before and after each backward, so that
// the optimizer reads gradients averaged over the ranks. `loss` sums a micro-batch's cross-entropy.
StepTally accumulate_gradients(nn::Module& model, const LossFn& loss, const data::Batch& batch, int64_t micro_batch,
                               std::optional<DType> low_precision, const amp::GradScaler* scaler,
                               bool tally_correct = true, optim::BackwardGradNorm* grad_norm = nullptr,
                               dist::GradientSync* sync = nullptr);

// zero_grad and accumulate_gradients; with `auto_batch`, an OutOfMemoryError halves
// `micro_batch` (said on `log`) and redoes the step from scratch, so the update stays the same.
// Without it, or at a micro-batch of 1, the error propagates.
StepTally accumulate_step(nn::Module& model, const LossFn& loss, optim::Optimizer& optimizer, const data::Batch& batch,
                          int64_t& micro_batch, bool auto_batch, std::optional<DType> low_precision,
                          const amp::GradScaler* scaler, int64_t step, std::ostream& log, bool tally_correct = true,
                          optim::BackwardGradNorm* grad_norm = nullptr, dist::GradientSync* sync = nullptr);

// optimizer.step(grad_factor), or for fp16 the scaler's step and update, telling `log` about
// skipped steps and a loss scale stuck at its minimum. Returns whether the parameters were updated.
bool apply_update(optim::Optimizer& optimizer, amp::GradScaler* scaler, int64_t step, std::ostream& log,
                  double grad_factor = 1);

// One record per logged step, to TensorBoard and DIR/metrics.jsonl. The log keeps the records of
// steps up to `kept_through` (0 for a fresh run, the checkpoint's step for a run resumed in its own
// directory) and drops the rest, a line torn by a kill with them: a killed run had logged steps
// that the resumed one logs again. TensorBoard is told the same with a session start at
// kept_through + 1, so every step is plotted once.
class MetricsLog {
 public:
  MetricsLog(const std::string& dir, int64_t kept_through);
  void write(int64_t step, const nlohmann::json& scalars);
  void flush() { events_.flush(); }

 private:
  io::EventWriter events_;
  std::ofstream jsonl_;
};

}  // namespace weft::train
