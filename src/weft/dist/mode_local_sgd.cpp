// Local SGD (--sync-every K, dist/ddp.h's LocalSGD) as the plan's data-parallel mode: each replica
// steps on its own gradients from rank 0's start, and the replicas average their parameters every
// K steps (and before evaluating or saving).
#include "weft/dist/parallel_plan.h"

namespace weft::dist {

namespace {

class LocalSGDMode : public DataParallelMode {
 public:
  explicit LocalSGDMode(const ModeContext& c)
      : group_(c.group), sync_every_(c.options.sync_every), bucket_bytes_(c.options.bucket_bytes) {}

  // Rank 0's parameters and buffers to every replica.
  void start(nn::Module& model) override { local_sgd_.emplace(model, group_, bucket_bytes_); }
  void after_step(int64_t steps) override {
    if (steps % sync_every_ == 0) local_sgd_->average_parameters();
  }
  void before_saving(int64_t steps) override {
    if (steps % sync_every_ != 0) local_sgd_->average_parameters();
  }
  std::string describe(int64_t rank_batch) const override {
    return str("; local SGD on ", group_.size(), " ranks, ", rank_batch, " samples each, parameters averaged every ",
               sync_every_, " steps");
  }

 private:
  ProcessGroup& group_;
  int64_t sync_every_, bucket_bytes_;
  std::optional<LocalSGD> local_sgd_;
};

}  // namespace

std::unique_ptr<DataParallelMode> make_local_sgd_mode(const ModeContext& context) {
  return std::make_unique<LocalSGDMode>(context);
}

}  // namespace weft::dist
