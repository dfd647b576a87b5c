// Local SGD (--sync-every K) as the plan's data-parallel mode: each replica steps on its own
// gradients from rank 0's start, and the replicas average their parameters every K steps (and
// before evaluating or saving).
#include "weft/autograd/grad_mode.h"
#include "weft/dist/parallel_plan.h"

namespace weft::dist {

namespace {

class LocalSGDMode : public DataParallelMode {
 public:
  explicit LocalSGDMode(const ModeContext& c) : group_(c.group), sync_every_(c.options.sync_every) {}

  void start(nn::Module& model) override {
    NoGradGuard no_grad;
    for (Tensor& p : model.parameters()) group_.broadcast(p, 0);
    for (auto& [name, buffer] : model.named_buffers()) group_.broadcast(buffer, 0);
  }
  void after_step(nn::Module& model, int64_t steps) override {
    if (steps % sync_every_ == 0) average(model);
  }
  void before_saving(nn::Module& model, int64_t steps) override {
    if (steps % sync_every_ != 0) average(model);
  }
  std::string describe(int64_t rank_batch) const override {
    return str("; local SGD on ", group_.size(), " ranks, ", rank_batch, " samples each, parameters averaged every ",
               sync_every_, " steps");
  }

 private:
  void average(nn::Module& model) {
    NoGradGuard no_grad;
    for (Tensor& p : model.parameters()) group_.all_reduce(p, ReduceOp::avg);
  }

  ProcessGroup& group_;
  int64_t sync_every_;
};

}  // namespace

std::unique_ptr<DataParallelMode> make_local_sgd_mode(const ModeContext& context) {
  return std::make_unique<LocalSGDMode>(context);
}

}  // namespace weft::dist
