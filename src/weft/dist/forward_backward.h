// The forward-backward functions the parallel plan (dist/parallel_plan.h) gives the trainer: the
// plain one is the trainer's own (train/step.h's accumulate_step: micro-batches, autocast,
// auto-batch, the loss scaler); under pipeline parallelism (--parallel pp, dist/pipeline.h) the
// step's micro-batches run through the stages by the schedule (GPipe or 1F1B) instead, and
// evaluation passes each batch through the stages. (The norm for clipping and the checkpoint's
// runs over the stages: dist/split_model.h.)
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "weft/data/dataset.h"
#include "weft/dist/pipeline.h"
#include "weft/optim/optimizer.h"

namespace weft::dist {

// The summed cross-entropy of outputs [N, C] against targets [N]: ops' cross_entropy, or under
// tensor parallelism the vocabulary-parallel one, whose outputs are each rank's slice of the classes.
using LossFn = std::function<Tensor(const Tensor& outputs, const Tensor& targets)>;

struct StepTally {
  double loss_sum = 0;  // summed cross-entropy of the batch's predictions
  int64_t correct = 0;  // predictions whose argmax is the target, when asked for
};

struct PipelineTally {
  StepTally tally;                   // the last stage's summed cross-entropy (0 on the others)
  PipelineStepResult pipeline;
};
// zero_grad, then one step's forwards and backwards of `micro_batches` micro-batches of `batch`
// through the stages (under autocast to `low_precision` when given), the tied embedding's gradient
// summed between the first and last stage. Each micro-batch's loss is `loss` (its summed cross-
// entropy over the predictions: vocab-parallel when the stages are tensor parallel) over the
// batch's predictions, so the gradients are the batch's mean loss's, as in accumulate_step.
PipelineTally pipeline_step(GPTStage& stage, ProcessGroup& stages, PipelineSchedule schedule,
                            optim::Optimizer& optimizer, const data::Batch& batch, int64_t micro_batches,
                            std::optional<DType> low_precision, const LossFn& loss);

// The stages as one model for evaluation: every stage is given the batch's tokens; the first runs
// them, each passes its activations on, and the last returns the logits. The other stages return
// [B, T, 1] zeros, and `pipeline_loss` makes the last stage's loss every stage's.
class PipelineForward : public nn::Module {
 public:
  PipelineForward(std::shared_ptr<GPTStage> stage, ProcessGroup& stages);
  Tensor forward(const Tensor& tokens) override;  // under NoGradGuard

 private:
  std::shared_ptr<GPTStage> stage_;  // a child: eval() and train() reach it
  ProcessGroup& stages_;
};
// `loss` of the last stage's logits, broadcast to every stage (collective; for evaluation: not
// differentiable).
LossFn pipeline_loss(ProcessGroup& stages, LossFn loss);

}  // namespace weft::dist
