// ZeRO 1, 2 and 3 as the plan's data-parallel mode (dist/zero.h): the optimizer updates this
// rank's shards, the gradient's norm and the checkpoint come from every rank's pieces.
#include "weft/dist/parallel_plan.h"
#include "weft/dist/zero.h"

namespace weft::dist {

namespace {

class ZeroMode : public DataParallelMode {
 public:
  explicit ZeroMode(const ModeContext& c)
      : zero_(c.model, c.group,
              ZeroOptions{.stage = c.options.zero_stage, .bucket_bytes = c.options.bucket_bytes, .overlap = c.options.overlap}),
        stage_(c.options.zero_stage),
        parallel_(c.options.parallel),
        ranks_name_(c.ranks_name) {}

  GradientSync* sync() override { return &zero_; }
  std::vector<Tensor> shard(std::vector<Tensor> per_param, DType dtype) const override {
    return zero_.shard(per_param, dtype);
  }
  std::vector<Tensor> optimizer_params(const nn::Module&) const override { return zero_.shards(); }
  bool shards_state() const override { return true; }
  double grad_norm(const nn::Module&, optim::BackwardGradNorm*) const override { return zero_.grad_norm(); }
  std::vector<double> grad_squares(const nn::Module&) const override { return zero_.grad_squares(); }
  void after_update() override { zero_.finish_step(); }

  // Each rank takes its shards of one process's state (which a sharded checkpoint is assembled
  // into), whatever the world size it was saved at.
  OptimizerStateIO optimizer_io(OptimizerStateIO, optim::Optimizer& optimizer, const std::vector<std::string>& names,
                                const std::string& resume_dir) override {
    return {.name = optimizer.name(),
            .save = [this, &optimizer, names] { return zero_.gather_state(optimizer, names); },
            .load = [this, &optimizer, names, resume_dir](const std::map<std::string, Tensor>& dict, bool keyed_by_name) {
              WEFT_CHECK(keyed_by_name, FormatError, "--parallel ", parallel_, ": ", resume_dir,
                         " keys its optimizer state by position (an older weft); resume it without ZeRO once to "
                         "rewrite it");
              zero_.load_full_state_dict(optimizer, dict, names);
            }};
  }
  void before_loading() override { zero_.gather_parameters(); }
  void after_loading() override { zero_.release_parameters(); }

  // This rank's pieces of the parameters and of their optimizer state; rank 0 adds the buffers.
  std::optional<CheckpointShard> checkpoint_shard(const nn::Module& model, const optim::Optimizer& optimizer,
                                                  const std::vector<std::string>& names) const override {
    CheckpointShard shard{.tensors = zero_.local_state(optimizer, names), .parts = {}, .layout = {}};
    const std::vector<Tensor> params = model.parameters();
    for (const ZeroDataParallel::Piece& piece : zero_.pieces(zero_.rank())) {
      const Tensor& p = params[piece.param];
      shard.parts[names[piece.param]] = {.whole = p.shape(), .dtype = p.dtype(),
                                         .run = {.begin = piece.begin, .length = piece.length, .count = 1,
                                                 .stride = piece.length},
                                         .local = {piece.length}};
    }
    if (zero_.rank() == 0) {
      for (const auto& [name, buffer] : model.named_buffers()) {
        shard.tensors[name] = buffer.reshape({buffer.numel()}).clone();
        shard.parts[name] = whole_part(buffer.shape(), buffer.dtype());
      }
    }
    return shard;
  }

  std::string describe(int64_t rank_batch) const override {
    return str("; ZeRO-", stage_, " on ", zero_.ranks(), ranks_name_, ", ", rank_batch, " samples each, ",
               stage_ == 1   ? "optimizer states"
               : stage_ == 2 ? "optimizer states and gradients"
                             : "optimizer states, gradients and parameters",
               " sharded in ", zero_.buckets(), stage_ == 3 ? " layers" : " buckets");
  }

 private:
  ZeroDataParallel zero_;
  int stage_;
  std::string parallel_, ranks_name_;
};

}  // namespace

std::unique_ptr<DataParallelMode> make_zero_mode(const ModeContext& context) { return std::make_unique<ZeroMode>(context); }

}  // namespace weft::dist
