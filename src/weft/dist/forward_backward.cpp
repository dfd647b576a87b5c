#include "weft/dist/forward_backward.h"

#include "weft/autograd/autocast_mode.h"
#include "weft/autograd/grad_mode.h"
#include "weft/ops/arith.h"
#include "weft/ops/autocast.h"

namespace weft::dist {

namespace {

bool is_last(const GPTStage& stage) { return stage.partition.holds_head(stage.stage); }

// The [B, T, dim] activations the stages pass on, in the parameters' dtype (f32, or bf16 under
// master weights: what a block puts out under autocast).
StageFunction stage_function(GPTStage& stage, int64_t rows, int64_t length,
                                   std::function<Tensor(const Tensor&, int64_t)> forward) {
  return {.forward = std::move(forward),
          .activation = {rows, length, stage.config.dim},
          .dtype = stage.parameters().front().dtype()};
}

}  // namespace

PipelineTally pipeline_step(GPTStage& stage, ProcessGroup& stages, PipelineSchedule schedule,
                            optim::Optimizer& optimizer, const data::Batch& batch, int64_t micro_batches,
                            std::optional<DType> low_precision, const LossFn& loss) {
  optimizer.zero_grad();
  const int64_t rows = batch.targets.size(0) / micro_batches, length = batch.targets.size(1);
  const double predictions = static_cast<double>(batch.targets.numel());
  AutocastCopies copies(optimizer.params(), optimizer.low_precision_copies());
  AutocastGuard autocast(low_precision);
  const StageFunction function = stage_function(stage, rows, length, [&](const Tensor& x, int64_t micro) {
    const Tensor y = stage(x);
    if (!is_last(stage)) return y;
    const Tensor targets = batch.targets.narrow(0, micro * rows, rows).reshape({-1});
    return mul(loss(y.view({targets.numel(), y.size(-1)}), targets), 1.0 / predictions);
  });
  PipelineTally result;
  result.pipeline = run_pipeline_step(stages, schedule, micro_batches, function, [&](int64_t micro) {
    return batch.inputs.narrow(0, micro * rows, rows);
  });
  stage.tie_gradients(stages);
  result.tally.loss_sum = result.pipeline.loss_sum * predictions;
  return result;
}

PipelineForward::PipelineForward(std::shared_ptr<GPTStage> stage, ProcessGroup& stages)
    : Module("PipelineForward"), stages_(stages) {
  register_module("stage", stage_, std::move(stage));
}

Tensor PipelineForward::forward(const Tensor& tokens) {
  const int64_t s = stage_->stage, rows = tokens.size(0), length = tokens.size(1);
  const StageFunction shape = stage_function(*stage_, rows, length, {});
  Tensor x = tokens;
  if (s > 0) {
    x = Tensor::empty(shape.activation, shape.dtype);
    stages_.recv(x, static_cast<int>(s - 1));
  }
  const Tensor y = (*stage_)(x);
  if (is_last(*stage_)) return y;
  stages_.send(Tensor::empty(shape.activation, shape.dtype).copy_(y), static_cast<int>(s + 1));
  return Tensor::zeros({rows, length, 1});
}

LossFn pipeline_loss(ProcessGroup& stages, LossFn loss) {
  return [&stages, loss = std::move(loss)](const Tensor& outputs, const Tensor& targets) {
    const bool last = stages.rank() == stages.size() - 1;
    Tensor sum = Tensor::scalar(last ? loss(outputs, targets).item() : 0.0, DType::f64);
    stages.broadcast(sum, stages.size() - 1);
    return sum;
  };
}

}  // namespace weft::dist
