// ZeRO's bytes per rank: what the allocator holds for the model states (parameters, gradients,
// optimizer states) after a step, against the ZeRO paper's formulas as weft plan computes them, for
// each stage over N = 1, 2 (and 4) ranks, in weft's f32 layout and with master weights. And the
// gathered layers of stage 3 are freed between their uses.
#include <gtest/gtest.h>

#include <cstdio>

#include "weft/autograd/grad_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/dist/zero.h"
#include "weft/memory/planner.h"
#include "weft/nn/container.h"
#include "weft/nn/linear.h"
#include "weft/ops/loss.h"
#include "weft/optim/adam.h"

namespace weft::dist {
namespace {

ProcessGroup& world() { return ProcessGroup::world(); }
int64_t allocated() { return CachingAllocator::cpu().stats().allocated_bytes; }

struct Measured {
  int64_t psi = 0;           // parameters
  int64_t model_states = 0;  // bytes the step leaves allocated
  int64_t step_peak = 0;     // the peak above what was allocated before the model (building it included)
  int64_t after_forward = 0; // what the forward added: its activations, and under stage 3 no parameters
};

// A stack of wide layers, 10.5M parameters: large enough that the allocator's rounding of each
// buffer (to 2 MiB segments above 1 MiB) is a few percent of the bytes measured.
std::shared_ptr<nn::Module> wide_model() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(1024, 2048), std::make_shared<nn::Linear>(2048, 2048),
                                          std::make_shared<nn::Linear>(2048, 2048), std::make_shared<nn::Linear>(2048, 10));
}

// One AdamW step of wide_model under ZeRO `stage` over `group`; bf16 parameters and gradients
// with f32 masters when `master_weights`.
Measured one_step(ProcessGroup& group, int stage, bool master_weights) {
  Generator data(3);
  const DType dtype = master_weights ? DType::bf16 : DType::f32;
  const Tensor x = Tensor::randn({8, 1024}, data).to(dtype);
  const Tensor y = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, {8});
  Measured m;
  const int64_t before = allocated();
  CachingAllocator::cpu().reset_peak_stats();
  {
    manual_seed(1);
    std::shared_ptr<nn::Module> model = wide_model();
    m.psi = model->num_parameters();
    std::vector<Tensor> masters;
    if (master_weights) {
      NoGradGuard no_grad;
      for (const Tensor& p : model->parameters()) masters.push_back(p.clone());
      model->to(DType::bf16);
    }
    ZeroDataParallel zero(*model, group, {.stage = stage});
    if (master_weights) masters = zero.shard(masters, DType::f32);
    optim::AdamW optimizer(master_weights ? masters : zero.shards(), {});
    if (master_weights) optimizer.keep_masters_of(zero.shards());
    masters.clear();
    zero.prepare_backward(true);
    const int64_t at_rest = allocated();
    Tensor loss = cross_entropy((*model)(x), y);
    m.after_forward = allocated() - at_rest;
    loss.backward();
    zero.finish_backward();
    optimizer.step();
    zero.finish_step();
    m.model_states = allocated() - before;
    m.step_peak = CachingAllocator::cpu().stats().peak_allocated_bytes - before;
  }
  return m;
}

int64_t planned(int64_t psi, int stage, int64_t ranks, bool master_weights) {
  memory::PlanRequest request;
  request.precision = master_weights ? memory::Precision::bf16 : memory::Precision::fp32;
  request.optimizer = memory::OptimizerKind::adamw;
  request.zero = stage;
  request.world = ranks;
  request.batch = ranks;
  const memory::Plan plan = memory::make_plan(memory::ModelDescription::parameters_only(psi), request);
  return plan.params_bytes + plan.grads_bytes + plan.optimizer_bytes;
}

TEST(ZeroMemory, ModelStatesPerRankAreThePapersFormulas) {
  const int rank = world().rank(), size = world().size();
  // Groups of 1 and 2 consecutive ranks on a launch of 2, of 4 on a launch of 4 (ctest runs both).
  for (int ranks = size > 2 ? 4 : 1; ranks <= size; ranks *= 2) {
    std::unique_ptr<ProcessGroup> group = world().split(rank / ranks, rank);
    for (bool master_weights : {false, true}) {
      for (int stage = 1; stage <= 3; ++stage) {
        const Measured m = one_step(*group, stage, master_weights);
        // Stage 3 frees each layer after its forward: what is left is activations (a batch of 8),
        // not the 16.8 MB of one f32 layer, let alone the model.
        if (stage == 3) {
          EXPECT_LT(m.after_forward, int64_t{1} << 20) << "over " << ranks << " ranks";
        }
        const int64_t want = planned(m.psi, stage, ranks, master_weights);
        const double error = static_cast<double>(m.model_states - want) / static_cast<double>(want);
        EXPECT_LT(std::abs(error), 0.10) << "stage " << stage << " over " << ranks << " ranks, "
                                         << (master_weights ? "master weights" : "f32") << ": measured "
                                         << m.model_states << " B, the formula " << want << " B";
        if (rank == 0)
          std::printf("ZeRO-%d  N=%d  %-14s  measured %9.3f MB  formula %9.3f MB  (%+.1f%%)  step peak %9.3f MB\n",
                      stage, ranks, master_weights ? "master weights" : "f32", m.model_states / 1e6, want / 1e6,
                      100 * error, m.step_peak / 1e6);
      }
    }
  }
}

}  // namespace
}  // namespace weft::dist
