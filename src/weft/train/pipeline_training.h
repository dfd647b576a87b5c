// What the trainer (train/trainer.h) does differently under pipeline parallelism (--parallel pp,
// dist/pipeline.h): the step's micro-batches run through the stages by the schedule instead of
// accumulate_step's loop; evaluation passes each batch through the stages; the norm for clipping
// and the checkpoint's runs span the stages.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weft/data/dataset.h"
#include "weft/dist/pipeline.h"
#include "weft/optim/optimizer.h"
#include "weft/train/checkpoint.h"
#include "weft/train/step.h"

namespace weft::train {

struct PipelineTally {
  StepTally tally;                   // the last stage's summed cross-entropy (0 on the others)
  dist::PipelineStepResult pipeline;
};
// zero_grad, then one step's forwards and backwards of `micro_batches` micro-batches of `batch`
// through the stages (under autocast to `low_precision` when given), the tied embedding's gradient
// summed between the first and last stage. Each micro-batch's loss is its summed cross-entropy
// over the batch's predictions, so the gradients are the batch's mean loss's, as in accumulate_step.
PipelineTally pipeline_step(dist::GPTStage& stage, dist::ProcessGroup& stages, dist::PipelineSchedule schedule,
                            optim::Optimizer& optimizer, const data::Batch& batch, int64_t micro_batches,
                            std::optional<DType> low_precision);

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
// The summed cross-entropy of the last stage's logits, broadcast to every stage (collective; for
// evaluation: not differentiable).
LossFn pipeline_loss(dist::ProcessGroup& stages);

// The 2-norm of the whole model's gradients: the stages' squares summed (the last stage's copy of
// the tied embedding counted once).
double pipeline_grad_norm(const dist::GPTStage& stage, dist::ProcessGroup& stages);

// This rank's part of a sharded checkpoint: its stage's parameters whole, with their optimizer
// state, when `writes` (the first replica); the layout (used from rank 0) names the world rank that
// holds each of the whole model's parameters, `whole` its names and shapes, stage s of the first
// replica being world rank s * replicas.
CheckpointShard pipeline_shard(const dist::GPTStage& stage, const OptimizerStateIO& optimizer,
                               const std::vector<std::pair<std::string, Shape>>& whole, int64_t replicas, bool writes);

// A whole model's state dict (or an optimizer's, "NAME.FIELD") -> the entries of `stage`'s parameters.
std::map<std::string, Tensor> stage_state(const std::map<std::string, Tensor>& whole, const dist::GPTStage& stage);

}  // namespace weft::train
