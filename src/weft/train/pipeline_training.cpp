#include "weft/train/pipeline_training.h"

#include <cmath>
#include <set>

#include "weft/autograd/autocast_mode.h"
#include "weft/autograd/grad_mode.h"
#include "weft/ops/arith.h"
#include "weft/ops/autocast.h"
#include "weft/optim/clip.h"

namespace weft::train {

namespace {

bool is_last(const dist::GPTStage& stage) { return stage.stage == stage.stages - 1; }

// What stage 0 and the last both hold, the tied table: the last stage's copy is not counted twice.
bool is_tied_copy(const dist::GPTStage& stage, const std::string& name) {
  return stage.stages > 1 && is_last(stage) && name == "wte.weight";
}

// The [B, T, dim] activations the stages pass on, in the parameters' dtype (f32, or bf16 under
// master weights: what a block puts out under autocast).
dist::StageFunction stage_function(dist::GPTStage& stage, int64_t rows, int64_t length,
                                   std::function<Tensor(const Tensor&, int64_t)> forward) {
  return {.forward = std::move(forward),
          .activation = {rows, length, stage.config.dim},
          .dtype = stage.parameters().front().dtype()};
}

}  // namespace

PipelineTally pipeline_step(dist::GPTStage& stage, dist::ProcessGroup& stages, dist::PipelineSchedule schedule,
                            optim::Optimizer& optimizer, const data::Batch& batch, int64_t micro_batches,
                            std::optional<DType> low_precision) {
  optimizer.zero_grad();
  const int64_t rows = batch.targets.size(0) / micro_batches, length = batch.targets.size(1);
  const double predictions = static_cast<double>(batch.targets.numel());
  AutocastCopies copies(optimizer.params(), optimizer.low_precision_copies());
  AutocastGuard autocast(low_precision);
  const dist::StageFunction function = stage_function(stage, rows, length, [&](const Tensor& x, int64_t micro) {
    const Tensor y = stage(x);
    if (!is_last(stage)) return y;
    const Tensor targets = batch.targets.narrow(0, micro * rows, rows).reshape({-1});
    return mul(summed_cross_entropy(y.view({targets.numel(), y.size(-1)}), targets), 1.0 / predictions);
  });
  PipelineTally result;
  result.pipeline = dist::run_pipeline_step(stages, schedule, micro_batches, function, [&](int64_t micro) {
    return batch.inputs.narrow(0, micro * rows, rows);
  });
  stage.tie_gradients(stages);
  result.tally.loss_sum = result.pipeline.loss_sum * predictions;
  return result;
}

PipelineForward::PipelineForward(std::shared_ptr<dist::GPTStage> stage, dist::ProcessGroup& stages)
    : Module("PipelineForward"), stages_(stages) {
  register_module("stage", stage_, std::move(stage));
}

Tensor PipelineForward::forward(const Tensor& tokens) {
  const int64_t s = stage_->stage, rows = tokens.size(0), length = tokens.size(1);
  const dist::StageFunction shape = stage_function(*stage_, rows, length, {});
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

LossFn pipeline_loss(dist::ProcessGroup& stages) {
  return [&stages](const Tensor& outputs, const Tensor& targets) {
    const bool last = stages.rank() == stages.size() - 1;
    Tensor loss = Tensor::scalar(last ? summed_cross_entropy(outputs, targets).item() : 0.0, DType::f64);
    stages.broadcast(loss, stages.size() - 1);
    return loss;
  };
}

double pipeline_grad_norm(const dist::GPTStage& stage, dist::ProcessGroup& stages) {
  std::vector<Tensor> counted;
  for (const auto& [name, p] : stage.named_parameters())
    if (!is_tied_copy(stage, name)) counted.push_back(p);
  const double mine = optim::grad_norm(counted);
  Tensor squares = Tensor::scalar(mine * mine, DType::f64);
  stages.all_reduce(squares, dist::ReduceOp::sum);
  return std::sqrt(squares.item());
}

CheckpointShard pipeline_shard(const dist::GPTStage& stage, const OptimizerStateIO& optimizer,
                               const std::vector<std::pair<std::string, Shape>>& whole, int64_t replicas, bool writes) {
  CheckpointShard shard{.tensors = {}, .layout = nlohmann::json::object()};
  const DType dtype = stage.parameters().front().dtype();
  for (const auto& [name, shape] : whole) {
    const int64_t holder = dist::gpt_stage_of(name, stage.config.layers, stage.stages) * replicas;
    shard.layout[name] = {{"shape", shape}, {"dtype", dtype_name(dtype)}, {"runs", {{holder, 0, numel(shape)}}}};
  }
  if (!writes) return shard;
  const std::map<std::string, Tensor> state = optimizer.save();
  auto flat = [](const Tensor& t) { return t.dim() == 0 ? t.clone() : t.contiguous().reshape({t.numel()}).clone(); };
  for (const auto& [name, p] : stage.named_parameters()) {
    if (is_tied_copy(stage, name)) continue;
    shard.tensors[name] = flat(p.detach());
    for (auto it = state.lower_bound(name + "."); it != state.end() && it->first.starts_with(name + "."); ++it)
      if (it->first.find('.', name.size() + 1) == std::string::npos) shard.tensors[it->first] = flat(it->second);
  }
  return shard;
}

std::map<std::string, Tensor> stage_state(const std::map<std::string, Tensor>& whole, const dist::GPTStage& stage) {
  std::set<std::string> mine;
  for (const auto& [name, p] : stage.named_parameters()) mine.insert(name);
  std::map<std::string, Tensor> out;
  for (const auto& [key, tensor] : whole) {
    const size_t dot = key.rfind('.');
    if (mine.contains(key) || (dot != std::string::npos && mine.contains(key.substr(0, dot)))) out[key] = tensor;
  }
  return out;
}

}  // namespace weft::train
