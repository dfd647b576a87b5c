#include "weft/dist/parallel_plan.h"

#include <cmath>
#include <cstdio>

#include "weft/autograd/grad_mode.h"
#include "weft/nn/gpt.h"
#include "weft/ops/loss.h"

namespace weft::dist {

// The data-parallel modes, each made in its own file; the first whose `applies` holds is the plan's.
std::unique_ptr<DataParallelMode> make_zero_mode(const ModeContext& context);
std::unique_ptr<DataParallelMode> make_local_sgd_mode(const ModeContext& context);
std::unique_ptr<DataParallelMode> make_ddp_mode(const ModeContext& context);

namespace {

struct ModeEntry {
  bool (*applies)(const ParallelOptions& options, int replicas);
  std::unique_ptr<DataParallelMode> (*make)(const ModeContext& context);
};
constexpr ModeEntry kModes[] = {
    {[](const ParallelOptions& o, int) { return o.zero_stage > 0; }, make_zero_mode},
    {[](const ParallelOptions& o, int replicas) { return replicas > 1 && o.sync_every > 1; }, make_local_sgd_mode},
    {[](const ParallelOptions&, int replicas) { return replicas > 1; }, make_ddp_mode},
};

std::string fixed(double value, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

}  // namespace

double DataParallelMode::grad_norm(const nn::Module& model, optim::BackwardGradNorm* backward_norm) const {
  return backward_norm ? backward_norm->norm() : optim::grad_norm(model.parameters());
}

std::vector<double> DataParallelMode::grad_squares(const nn::Module& model) const {
  std::vector<double> squares;
  for (const Tensor& p : model.parameters()) {
    const double norm = optim::grad_norm({p});
    squares.push_back(norm * norm);
  }
  return squares;
}

ParallelPlan::ParallelPlan(ProcessGroup& world, ParallelOptions options)
    : world_(world),
      options_(std::move(options)),
      layout_(RankLayout::of(world.size(), options_.tp, options_.pp)),
      groups_(split_groups(world, layout_)) {
  // Under pipeline parallelism the step computes the loss on the last stage, and evaluation has it
  // broadcast.
  loss_ = groups_.tp ? LossFn([&tp_ranks = *groups_.tp](const Tensor& logits, const Tensor& targets) {
            return vocab_parallel_cross_entropy(logits, targets, tp_ranks, Reduction::sum);
          })
                     : LossFn([](const Tensor& outputs, const Tensor& targets) {
                         return cross_entropy(outputs, targets, Reduction::sum);
                       });
  evaluation_loss_ = groups_.pp ? pipeline_loss(*groups_.pp, loss_) : loss_;
}

std::shared_ptr<nn::Module> ParallelPlan::split(std::shared_ptr<nn::Module> model) {
  if (splits_model()) layers_ = dynamic_cast<const nn::GPT&>(*model).config.layers;
  if (groups_.tp) tp_layout_ = parallelize_gpt(dynamic_cast<nn::GPT&>(*model), *groups_.tp);
  // Every parameter's name and whole shape, which a resume checks the checkpoint against (a
  // tensor-parallel rank or a stage holds a share).
  for (const auto& [name, p] : model->named_parameters())
    whole_shapes_[name] = tp_layout_.contains(name) ? tp_layout_.at(name).whole : p.shape();
  // The rest of the whole goes with the stage, or the rest of the rank's tensor-parallel slices.
  if (groups_.pp) {
    stage_ = std::make_shared<GPTStage>(dynamic_cast<nn::GPT&>(*model), groups_.pp->rank(), layout_.pp);
    model = stage_;
    pipeline_forward_ = std::make_shared<PipelineForward>(stage_, *groups_.pp);
  }
  for (const auto& [name, p] : model->named_parameters()) param_names_.push_back(name);
  return model;
}

void ParallelPlan::distribute(nn::Module& model) {
  const ModeContext context{.model = model, .group = data_group(), .options = options_, .ranks_name = ranks_name()};
  for (const ModeEntry& entry : kModes)
    if (entry.applies(options_, replicas())) {
      mode_ = entry.make(context);
      return;
    }
  mode_ = std::make_unique<DataParallelMode>();
}

ForwardBackward ParallelPlan::forward_backward(PlainForwardBackward plain, nn::Module& model,
                                               optim::Optimizer& optimizer, std::optional<DType> low_precision) {
  if (!stage_)
    return [this, plain = std::move(plain), &model](const data::Batch& batch, optim::BackwardGradNorm* norm) {
      return plain(model, loss_, batch, norm, mode_->sync());
    };
  // The replicas average their gradients after the pipeline's flush, as Megatron's DDP does.
  return [this, &optimizer, low_precision](const data::Batch& batch, optim::BackwardGradNorm*) {
    const PipelineTally t = pipeline_step(*stage_, *groups_.pp, options_.pp_schedule, optimizer, batch,
                                          options_.micro_batches, low_precision, loss_);
    mode_->after_pipeline_step();
    pipeline_idle_ += t.pipeline.idle_seconds;
    pipeline_busy_ += t.pipeline.seconds;
    return t.tally;
  };
}

double ParallelPlan::grad_norm(const nn::Module& model, optim::BackwardGradNorm* backward_norm) {
  if (!splits_model()) return mode_->grad_norm(model, backward_norm);
  return split_model_grad_norm(param_names_, mode_->grad_squares(model), tp_layout_, layout_, layers_,
                               mode_->shards_state(), world_);
}

OptimizerStateIO ParallelPlan::optimizer_io(OptimizerStateIO whole, optim::Optimizer& optimizer,
                                            const std::string& resume_dir) {
  return mode_->optimizer_io(std::move(whole), optimizer, param_names_, resume_dir);
}

void ParallelPlan::resume(nn::Module& model, const OptimizerStateIO& optimizer_io, const std::string& resume_dir,
                          const std::function<WholeState(const nn::Module* fit)>& read) {
  mode_->before_loading();
  const WholeState whole = read(splits_model() ? nullptr : &model);
  std::map<std::string, Tensor> weights = whole.weights, optimizer_state = whole.optimizer;
  if (splits_model()) {
    // Checked against the whole model's parameters, as one process checks its model.
    for (const auto& [name, shape] : whole_shapes_) {
      auto it = weights.find(name);
      WEFT_CHECK(it != weights.end(), FormatError, resume_dir, ": has no '", name, "', a parameter of the ",
                 options_.parallel, " run's model");
      WEFT_CHECK(it->second.shape() == shape, FormatError, resume_dir, ": '", name, "' is ",
                 shape_str(it->second.shape()), ", the run's model has ", shape_str(shape));
    }
    for (const auto& [name, tensor] : weights)
      WEFT_CHECK(whole_shapes_.contains(name), FormatError, resume_dir, ": holds '", name,
                 "', which the run's model has no parameter of");
    WEFT_CHECK(whole.keyed_by_name, FormatError, "--parallel ", options_.parallel, ": ", resume_dir, " keys its "
               "optimizer state by position (an older weft); resume it in one process once to rewrite it");
    // The rank's parts: its stage's parameters, or its slices of them, and their optimizer state.
    const std::map<std::string, TensorPart> held = split_model_parts(model, tp_layout_, layout_, world_.rank());
    weights = take_parts(weights, held);
    optimizer_state = take_parts(optimizer_state, held);
  }
  nn::StateDict state_dict;
  for (const auto& [name, tensor] : weights) state_dict.insert(name, tensor);
  model.load_state_dict(state_dict);
  optimizer_io.load(optimizer_state, whole.keyed_by_name);
  mode_->after_loading();
}

std::optional<CheckpointShard> ParallelPlan::checkpoint_shard(const nn::Module& model, const optim::Optimizer& optimizer,
                                                              const OptimizerStateIO& optimizer_io) {
  std::optional<CheckpointShard> shard =
      splits_model() ? split_model_shard(model, optimizer_io.save(), tp_layout_, layout_, world_.rank(), layers_)
                     : mode_->checkpoint_shard(model, optimizer, param_names_);
  if (shard) gather_shard_layout(*shard, world_);
  return shard;
}

std::string ParallelPlan::describe(int64_t rank_batch, int64_t micro_batch, bool print_schedule) const {
  std::string text;
  if (groups_.tp) text += str("; tensor parallel over ", layout_.tp, " ranks");
  if (stage_)
    text += str("; a pipeline of ", layout_.pp, " stages (", pipeline_schedule_name(options_.pp_schedule), ", ",
                options_.micro_batches, " micro-batches of ", micro_batch, ")");
  text += mode_->describe(rank_batch) + "\n";
  if (splits_model()) text += "ranks: " + layout_.describe() + "\n";
  if (stage_ && print_schedule) {
    const int64_t pp = layout_.pp, m = options_.micro_batches;
    text += pipeline_timeline(options_.pp_schedule, pp, m).draw() + "bubble: (p - 1) / (m + p - 1) = " +
            fixed(100.0 * static_cast<double>(pp - 1) / static_cast<double>(m + pp - 1), 1) +
            "% of each stage's slots idle\n";
  }
  return text;
}

int64_t ParallelPlan::bytes_communicated() const {
  int64_t bytes = (groups_.data ? *groups_.data : world_).status().bytes_issued;
  for (const auto* g : {groups_.tp.get(), groups_.pp.get()})
    if (g) bytes += g->status().bytes_issued;
  return bytes;
}

void ParallelPlan::report(nlohmann::json& setup, std::ostream& log) {
  if (!stage_) return;
  Tensor waited = Tensor::from_vector<double>({pipeline_idle_, pipeline_busy_}, {2});
  groups_.pp->all_reduce(waited, ReduceOp::sum);
  const std::vector<double> w = waited.to_vector<double>();
  const double pp = layout_.pp, m = static_cast<double>(options_.micro_batches);
  const double measured = w[1] > 0 ? w[0] / w[1] : 0, bubble = (pp - 1.0) / (m + pp - 1.0);
  setup["pipeline_idle_fraction"] = measured;
  setup["pipeline_bubble"] = bubble;
  log << "pipeline: the stages waited " << fixed(100 * measured, 1) << "% of their step time on a neighbour; the "
      << "bubble of " << layout_.pp << " stages and " << options_.micro_batches
      << " micro-batches, (p - 1) / (m + p - 1), is " << fixed(100 * bubble, 1) << "%\n";
}

}  // namespace weft::dist
