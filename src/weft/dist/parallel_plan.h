// A training run's parallelism as one object, as Megatron-core's parallel state and
// get_forward_backward_func are: built from the parallel options and the world, it
//
//   - lays the ranks out and splits their groups (dist/split_model.h: tensor parallel innermost,
//     then the data-parallel replicas, then the pipeline stages),
//   - splits the model: tensor parallel patches the built GPT in place, pipeline parallelism keeps
//     this rank's stage,
//   - owns the gradients' synchronisation through its data-parallel mode (below), the norm of the
//     whole model's gradient for clipping, and the loss (vocabulary-parallel under tp),
//   - gives the step's forward-backward function: the trainer's plain one (micro-batches), or the
//     pipeline's schedule (GPipe, 1F1B),
//   - says which part of the whole model's state the rank holds, for its checkpoint shard and for a
//     resume from a checkpoint of any layout (dist/sharded_state.h).
//
// The trainer's loop calls it the same way whatever the mode:
//
//   dist::ParallelPlan plan(world, options);
//   model = plan.split(model);
//   plan.distribute(*model);                           // ZeRO lays the parameters out here
//   optimizer = make(plan.optimizer_params(*model));
//   plan.resume(...);                                  // a checkpoint of any layout
//   plan.start(*model);                                // DDP's broadcast and hooks, local SGD's broadcast
//   ForwardBackward step = plan.forward_backward(accumulate, *model, *optimizer, low_precision);
//   each step: step(batch, norm); clip to plan.grad_norm(*model, norm); optimizer step;
//              plan.mode().after_update(); plan.mode().after_step(steps_taken)
//
// The data-parallel mode is looked up in one table (parallel_plan.cpp): each entry says when it
// applies and how it is made, and lives in its own file (dist/mode_*.cpp); all of them reduce
// through dist/gradient_buckets.h. Where none applies (one
// process, a split model without replicas) the base DataParallelMode, which does nothing, is the
// mode.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "weft/data/dataset.h"
#include "weft/dist/ddp.h"
#include "weft/dist/forward_backward.h"
#include "weft/dist/pipeline.h"
#include "weft/dist/process_group.h"
#include "weft/dist/sharded_state.h"
#include "weft/dist/split_model.h"
#include "weft/dist/tensor_parallel.h"
#include "weft/nn/module.h"
#include "weft/optim/clip.h"
#include "weft/optim/optimizer.h"

namespace weft::dist {

// What the plan takes of the trainer's options (train fills it from TrainOptions).
struct ParallelOptions {
  std::string parallel{};     // --parallel as given, for messages
  int zero_stage = 0;         // 1 to 3; 0 without ZeRO
  int tp = 1, pp = 1;
  PipelineSchedule pp_schedule = PipelineSchedule::gpipe;
  int64_t micro_batches = 1;  // --grad-accum
  int64_t bucket_bytes = int64_t{25} << 20;
  bool overlap = true;        // DDP's and ZeRO's buckets reduced during backward
  std::string grad_compress{};  // "" | "bf16" | "fp16": DDP's wire format
  int64_t sync_every = 1;     // local SGD when more than 1
};

// How the replicas of a model keep their gradients (or parameters) alike: none without replicas,
// DDP (a pipeline's replicas too), ZeRO, local SGD. Every method is called on every rank in the same
// order; collective ones are said so by their mode.
class DataParallelMode {
 public:
  virtual ~DataParallelMode() = default;
  // Once resumed, before the first step.
  virtual void start(nn::Module&) {}
  // Told around each micro-batch's backward of the plain step; nullptr: nothing to tell.
  virtual GradientSync* sync() { return nullptr; }
  // After a pipeline's flush: the gradients the optimizer reads become the replicas' average
  // (the synchronisation's reduce_gradients).
  virtual void after_pipeline_step() {
    if (GradientSync* gradients = sync()) gradients->reduce_gradients();
  }
  // A per-parameter list (the masters of --master-weights) cut as the optimizer's parameters are.
  virtual std::vector<Tensor> shard(std::vector<Tensor> per_param, DType) const { return per_param; }
  // What the optimizer updates: the model's parameters, or this rank's shards of them.
  virtual std::vector<Tensor> optimizer_params(const nn::Module& model) const { return model.parameters(); }
  // Whether the optimizer's parameters and state are this rank's shards of the replicas'.
  virtual bool shards_state() const { return false; }
  // The 2-norm of the averaged gradient: `backward_norm`'s, read during backward, when given.
  virtual double grad_norm(const nn::Module& model, optim::BackwardGradNorm* backward_norm) const;
  // Per parameter of `model`, the squared norm of this rank's gradient of it.
  virtual std::vector<double> grad_squares(const nn::Module& model) const;
  // After the optimizer's update, in its phase.
  virtual void after_update() {}
  // After `steps` steps; and before evaluating or saving after `steps`.
  virtual void after_step(int64_t /*steps*/) {}
  virtual void before_saving(int64_t /*steps*/) {}
  // The optimizer's state in and out of a checkpoint, from one process's (`whole`).
  virtual OptimizerStateIO optimizer_io(OptimizerStateIO whole, optim::Optimizer&, const std::vector<std::string>&,
                                        const std::string& /*resume_dir*/) {
    return whole;
  }
  // Around loading a checkpoint into the model.
  virtual void before_loading() {}
  virtual void after_loading() {}
  // This rank's part of a sharded checkpoint of the whole model; none: rank 0 writes it whole.
  virtual std::optional<CheckpointShard> checkpoint_shard(const nn::Module&, const optim::Optimizer&,
                                                          const std::vector<std::string>&) const {
    return std::nullopt;
  }
  // The bytes a synchronised step hands the all-reduces (DDP's buckets); 0 otherwise.
  virtual int64_t all_reduced_bytes() const { return 0; }
  // "; data parallel on 4 ranks, ...", for the trainer's first line; "" when there is nothing to say.
  virtual std::string describe(int64_t /*rank_batch*/) const { return ""; }
};

// What a mode is made from.
struct ModeContext {
  nn::Module& model;
  ProcessGroup& group;  // the data-parallel one
  const ParallelOptions& options;
  std::string ranks_name;  // " ranks", or " data-parallel replicas" of a split model
};

// A checkpoint's state read whole, for a resume to take its parts of.
struct WholeState {
  std::map<std::string, Tensor> weights;    // the whole model's state dict
  std::map<std::string, Tensor> optimizer;  // one process's optimizer state
  bool keyed_by_name = true;                // false: an older checkpoint's optimizer state, keyed by position
};

// The step's forward and backward of one batch: its summed loss and tally, the gradients left for
// the optimizer. `norm`, when given, reads the gradient's norm during the last backward.
using ForwardBackward = std::function<StepTally(const data::Batch& batch, optim::BackwardGradNorm* norm)>;
// The plain forward-backward, the trainer's: micro-batches of `model` through `loss`, `sync` told
// around each backward.
using PlainForwardBackward = std::function<StepTally(nn::Module& model, const LossFn& loss, const data::Batch& batch,
                                                     optim::BackwardGradNorm* norm, GradientSync* sync)>;

class ParallelPlan {
 public:
  // Collective over `world`: splits the groups. tp x pp that does not divide the world → ValueError.
  ParallelPlan(ProcessGroup& world, ParallelOptions options);

  int world_size() const { return world_.size(); }
  bool splits_model() const { return layout_.tp > 1 || layout_.pp > 1; }
  ProcessGroup& data_group() { return groups_.data ? *groups_.data : world_; }
  int replicas() { return data_group().size(); }
  int replica() { return data_group().rank(); }
  // " ranks", or " data-parallel replicas" of a split model.
  std::string ranks_name() const { return splits_model() ? " data-parallel replicas" : " ranks"; }

  // The model this rank trains: `model` (a GPT when split) patched for tensor parallelism, then
  // cut to this rank's pipeline stage.
  std::shared_ptr<nn::Module> split(std::shared_ptr<nn::Module> model);
  // The model evaluation runs (the stages as one under pp) and its loss (the last stage's,
  // broadcast); the training step's loss, vocabulary-parallel under tp.
  nn::Module& evaluation_model(nn::Module& model) { return pipeline_forward_ ? *pipeline_forward_ : model; }
  const LossFn& evaluation_loss() const { return evaluation_loss_; }
  const LossFn& loss() const { return loss_; }

  // Makes the data-parallel mode over the split model (ZeRO lays its parameters out).
  void distribute(nn::Module& model);
  DataParallelMode& mode() { return *mode_; }
  std::vector<Tensor> optimizer_params(const nn::Module& model) const { return mode_->optimizer_params(model); }
  // Once resumed: the mode starts (DDP broadcasts rank 0's weights and hooks the model).
  void start(nn::Module& model) { mode_->start(model); }

  // The step's forward-backward: `plain` with the mode's synchronisation, or the pipeline's schedule
  // followed by the mode's reduction among the replicas.
  ForwardBackward forward_backward(PlainForwardBackward plain, nn::Module& model, optim::Optimizer& optimizer,
                                   std::optional<DType> low_precision);
  // The 2-norm of the whole model's gradient (collective under a split).
  double grad_norm(const nn::Module& model, optim::BackwardGradNorm* backward_norm);

  // The optimizer state's checkpoint I/O from one process's (`whole`).
  OptimizerStateIO optimizer_io(OptimizerStateIO whole, optim::Optimizer& optimizer, const std::string& resume_dir);
  // Reads a checkpoint of any layout into `model` and the optimizer: `read(fit)` gives its state
  // whole (checked against `fit` when given: the model is whole), and the rank takes the parts it
  // holds (dist/sharded_state.h); a sharded optimizer (ZeRO) then takes its shards of those.
  void resume(nn::Module& model, const OptimizerStateIO& optimizer_io, const std::string& resume_dir,
              const std::function<WholeState(const nn::Module* fit)>& read);
  // This rank's part of a sharded checkpoint, its layout gathered from every rank (collective), or
  // none: rank 0 writes one process's.
  std::optional<CheckpointShard> checkpoint_shard(const nn::Module& model, const optim::Optimizer& optimizer,
                                                  const OptimizerStateIO& optimizer_io);

  // "; tensor parallel over 2 ranks; a pipeline of ...; data parallel on ...", and the rank layout
  // and the schedule's drawing (`print_schedule`) on lines of their own.
  std::string describe(int64_t rank_batch, int64_t micro_batch, bool print_schedule) const;
  // The bytes this rank handed its groups' operations so far.
  int64_t bytes_communicated() const;
  // Under pp: what the stages spent waiting on each other, against the bubble, into `setup` and
  // on `log` (collective over the stages).
  void report(nlohmann::json& setup, std::ostream& log);

 private:
  ProcessGroup& world_;
  ParallelOptions options_;
  RankLayout layout_;
  SplitGroups groups_;
  LossFn loss_, evaluation_loss_;
  int64_t layers_ = 0;
  TensorParallelLayout tp_layout_;
  std::map<std::string, Shape> whole_shapes_;  // the whole model's parameters, which a resume must find
  std::vector<std::string> param_names_;                    // this rank's model's
  std::shared_ptr<GPTStage> stage_;
  std::shared_ptr<PipelineForward> pipeline_forward_;
  std::unique_ptr<DataParallelMode> mode_;
  double pipeline_idle_ = 0, pipeline_busy_ = 0;
};

}  // namespace weft::dist
