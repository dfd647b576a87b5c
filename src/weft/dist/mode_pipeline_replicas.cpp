// The data-parallel replicas of a pipeline (--parallel dp,pp) as the plan's data-parallel mode:
// after the pipeline's flush, each gradient is averaged over the replicas (one blocking
// all-reduce per parameter; a stage that got no gradient of a parameter adds zeros).
#include "weft/autograd/grad_mode.h"
#include "weft/dist/parallel_plan.h"

namespace weft::dist {

namespace {

class PipelineReplicasMode : public DataParallelMode {
 public:
  explicit PipelineReplicasMode(const ModeContext& c) : group_(c.group) {}

  void after_pipeline_step(nn::Module& model) override {
    NoGradGuard no_grad;
    for (const Tensor& p : model.parameters()) {
      if (!p.grad().defined()) p.set_grad(Tensor::zeros(p.shape(), p.dtype()));
      Tensor grad = p.grad();
      group_.all_reduce(grad, ReduceOp::avg);
    }
  }

 private:
  ProcessGroup& group_;
};

}  // namespace

std::unique_ptr<DataParallelMode> make_pipeline_replicas_mode(const ModeContext& context) {
  return std::make_unique<PipelineReplicasMode>(context);
}

}  // namespace weft::dist
