// What the trainer (train/trainer.h) does differently under pipeline parallelism (--parallel pp,
// dist/pipeline.h): the step's micro-batches run through the stages by the schedule instead of
// accumulate_step's loop; evaluation passes each batch through the stages. (The norm for clipping
// and the checkpoint's runs over the stages: train/split_model.h.)
#pragma once
#include <cstdint>
#include <optional>

#include "weft/data/dataset.h"
#include "weft/dist/pipeline.h"
#include "weft/optim/optimizer.h"
#include "weft/train/step.h"

namespace weft::train {

struct PipelineTally {
  StepTally tally;                   // the last stage's summed cross-entropy (0 on the others)
  dist::PipelineStepResult pipeline;
};
// zero_grad, then one step's forwards and backwards of `micro_batches` micro-batches of `batch`
// through the stages (under autocast to `low_precision` when given), the tied embedding's gradient
// summed between the first and last stage. Each micro-batch's loss is `loss` (its summed cross-
// entropy over the predictions: vocab-parallel when the stages are tensor parallel) over the
// batch's predictions, so the gradients are the batch's mean loss's, as in accumulate_step.
PipelineTally pipeline_step(dist::GPTStage& stage, dist::ProcessGroup& stages, dist::PipelineSchedule schedule,
                            optim::Optimizer& optimizer, const data::Batch& batch, int64_t micro_batches,
                            std::optional<DType> low_precision, const LossFn& loss);

// The stages as one model for evaluation: every stage is given the batch's tokens; the first runs
// them, each passes its activations on, and the last returns the logits. The other stages return
// [B, T, 1] zeros, and `pipeline_loss` makes the last stage's loss every stage's.
class PipelineForward : public nn::Module {
 public:
  PipelineForward(std::shared_ptr<dist::GPTStage> stage, dist::ProcessGroup& stages);
  Tensor forward(const Tensor& tokens) override;  // under NoGradGuard

 private:
  std::shared_ptr<dist::GPTStage> stage_;  // a child: eval() and train() reach it
  dist::ProcessGroup& stages_;
};
// `loss` of the last stage's logits, broadcast to every stage (collective; for evaluation: not
// differentiable).
LossFn pipeline_loss(dist::ProcessGroup& stages, LossFn loss);

}  // namespace weft::train
