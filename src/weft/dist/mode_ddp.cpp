// DDP as the plan's data-parallel mode (dist/ddp.h): the buckets' all-reduce during backward, or
// after a pipeline's flush for its replicas (transient buckets, as weft plan counts them).
#include "weft/core/allocator.h"
#include "weft/dist/parallel_plan.h"

namespace weft::dist {

namespace {

class DDPMode : public DataParallelMode {
 public:
  explicit DDPMode(const ModeContext& c) : group_(c.group), options_(c.options), ranks_name_(c.ranks_name) {}

  // After resuming: DDP broadcasts rank 0's weights, which every rank has loaded alike.
  void start(nn::Module& model) override {
    const std::optional<DType> wire = options_.grad_compress.empty() ? std::nullopt
                                      : std::optional<DType>(options_.grad_compress == "bf16" ? DType::bf16 : DType::f16);
    ddp_.emplace(model, group_,
                 DDPOptions{.bucket_bytes = options_.bucket_bytes, .overlap = options_.overlap, .compress = wire,
                            .transient_buckets = options_.pp > 1});
  }
  GradientSync* sync() override { return &*ddp_; }
  int64_t all_reduced_bytes() const override { return ddp_->all_reduced_bytes(); }
  std::string describe(int64_t rank_batch) const override {
    return str("; data parallel on ", group_.size(), ranks_name_, ", ", rank_batch,
               " samples each, gradients all-reduced in ", ddp_->buckets(), " buckets",
               options_.overlap && options_.pp == 1 ? " during backward" : " after backward", ", ",
               format_bytes(ddp_->all_reduced_bytes()), " per step",
               options_.grad_compress.empty() ? "" : str(" in ", options_.grad_compress));
  }

 private:
  ProcessGroup& group_;
  const ParallelOptions& options_;
  std::string ranks_name_;
  std::optional<DistributedDataParallel> ddp_;
};

}  // namespace

std::unique_ptr<DataParallelMode> make_ddp_mode(const ModeContext& context) { return std::make_unique<DDPMode>(context); }

}  // namespace weft::dist
