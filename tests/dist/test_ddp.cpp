// DistributedDataParallel under mpirun: N ranks, each on its slice of the batch, step to the
// parameters one process reaches on the whole batch (each rank computes that reference itself).
#include <gtest/gtest.h>

#include <cmath>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/dist/ddp.h"
#include "weft/nn/linear.h"
#include "weft/nn/models.h"
#include "weft/ops/arith.h"
#include "weft/ops/linear.h"
#include "weft/ops/loss.h"
#include "weft/ops/reduce.h"
#include "weft/optim/sgd.h"

#include "dist/largest_difference.h"

namespace weft::dist {
namespace {

using testing::largest_difference;

ProcessGroup& group() { return ProcessGroup::world(); }

// Three SGD-with-momentum steps of the MLP on a batch of 8, against one process on all 8. The
// ranks start from different weights: DDP's broadcast makes them rank 0's, which the reference
// starts from. Buckets of 25 MiB (one) and of 64 KiB (several), with and without overlap; and the
// gradients compressed to bf16 and f16 for the all-reduce (half the bytes, each gradient rounded
// once more: steps within what 16 bits hold).
TEST(DDP, RanksOnSlicesOfTheBatchStepAsOneProcessOnAllOfIt) {
  const int rank = group().rank(), size = group().size();
  Generator data(5);
  const Tensor x = Tensor::randn({8, 1, 28, 28}, data);
  std::vector<int64_t> labels(8);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 3) % 10);
  const Tensor y = Tensor::from_vector(labels, {8});
  const int64_t per_rank = 8 / size;
  const Tensor my_x = x.narrow(0, rank * per_rank, per_rank).contiguous();
  const Tensor my_y = y.narrow(0, rank * per_rank, per_rank).contiguous();

  manual_seed(1);
  std::shared_ptr<nn::Module> reference = nn::make_mlp();
  optim::SGD reference_opt(reference->parameters(), 0.1, {.momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    reference_opt.zero_grad();
    cross_entropy((*reference)(x), y).backward();
    reference_opt.step();
  }
  int64_t f32_bytes = 0;
  for (std::optional<DType> compress : {std::optional<DType>(), std::optional<DType>(DType::bf16), std::optional<DType>(DType::f16)})
  for (int64_t bucket_bytes : {int64_t{25} << 20, int64_t{64} << 10}) {
    for (bool overlap : {true, false}) {
      manual_seed(1 + static_cast<uint64_t>(rank));
      std::shared_ptr<nn::Module> model = nn::make_mlp();
      DistributedDataParallel ddp(*model, group(), {.bucket_bytes = bucket_bytes, .overlap = overlap, .compress = compress});
      optim::SGD opt(model->parameters(), 0.1, {.momentum = 0.9});
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        ddp.prepare_backward(true);
        cross_entropy((*model)(my_x), my_y).backward();
        ddp.finish_backward();
        opt.step();
      }
      const std::string what = str("bucket ", bucket_bytes, " overlap ", overlap, " rank ", rank, " compress ",
                                   compress ? dtype_name(*compress) : "none");
      const double tolerance = !compress ? 1e-5 : *compress == DType::bf16 ? 2e-3 : 5e-4;
      EXPECT_LT(largest_difference(model->parameters(), reference->parameters()), tolerance) << what;
      if (!compress) f32_bytes = ddp.all_reduced_bytes();
      else EXPECT_EQ(2 * ddp.all_reduced_bytes(), f32_bytes) << what;
      if (bucket_bytes < (int64_t{1} << 20)) {
        EXPECT_GT(ddp.buckets(), 2) << what;
        if (overlap) EXPECT_GT(ddp.issued_during_backward(), 0) << what;
        else EXPECT_EQ(ddp.issued_during_backward(), 0) << what;
      }
    }
  }
}

struct TwoHeads : nn::Module {
  std::shared_ptr<nn::Linear> used, sometimes;
  TwoHeads() : Module("TwoHeads"), used(std::make_shared<nn::Linear>(4, 3)), sometimes(std::make_shared<nn::Linear>(4, 2)) {
    register_module("used", used);
    register_module("sometimes", sometimes);
  }
  Tensor forward(const Tensor& x) override { return (*used)(x); }
};

// A parameter only rank 0 uses does not stall its bucket elsewhere, and every rank ends with the
// average: rank 0's gradient over the world size.
TEST(DDP, AParameterWithoutAGradientOnSomeRanksGetsTheAverage) {
  const int rank = group().rank(), size = group().size();
  manual_seed(3);
  TwoHeads model;
  DistributedDataParallel ddp(model, group(), {.bucket_bytes = 1 << 20, .overlap = true, .compress = std::nullopt});
  const Tensor x = Tensor::ones({5, 4});
  ddp.prepare_backward(true);
  Tensor loss = sum(model(x));
  if (rank == 0) loss = add(loss, sum((*model.sometimes)(x)));
  loss.backward();
  ddp.finish_backward();
  ASSERT_TRUE(model.sometimes->weight.grad().defined());
  // d sum(x W^T + b) / dW = column sums of x for every row: 5 here, averaged over the ranks.
  const std::vector<float> got = model.sometimes->weight.grad().to_vector<float>();
  for (float g : got) EXPECT_FLOAT_EQ(g, 5.0f / static_cast<float>(size)) << "rank " << rank;
  for (float g : model.used->weight.grad().to_vector<float>()) EXPECT_FLOAT_EQ(g, 5.0f) << "rank " << rank;
}

// What a pipeline's replicas reduce after its flush (gradients summed outside backward's hooks)
// and local SGD's parameters go through the same buckets, several of them here: every rank ends
// with the average over the ranks, a parameter without a gradient on a rank counting as zeros.
TEST(DDP, GradientsAlreadyInAndLocalSgdsParametersAreAveragedInBuckets) {
  const int rank = group().rank(), size = group().size();
  const double mean_rank = (size - 1) / 2.0;
  for (bool transient : {false, true}) {
    manual_seed(1);
    std::shared_ptr<nn::Module> model = nn::make_mlp();
    DistributedDataParallel ddp(*model, group(), {.bucket_bytes = 64 << 10, .overlap = true, .compress = std::nullopt,
                                                  .transient_buckets = transient});
    ASSERT_GT(ddp.buckets(), 2);
    const std::vector<Tensor> params = model->parameters();
    for (size_t k = 1; k < params.size(); ++k) params[k].set_grad(Tensor::full(params[k].shape(), rank + 10.0 * k));
    if (rank == 0) params[0].set_grad(Tensor::full(params[0].shape(), 1));
    ddp.reduce_gradients();
    for (size_t k = 0; k < params.size(); ++k) {
      const double expected = k == 0 ? 1.0 / size : mean_rank + 10.0 * k;
      ASSERT_TRUE(params[k].grad().defined()) << k;
      EXPECT_EQ(largest_difference(params[k].grad(), Tensor::full(params[k].shape(), expected)), 0)
          << "parameter " << k << " transient " << transient << " rank " << rank;
    }
  }
  manual_seed(1 + static_cast<uint64_t>(rank));
  std::shared_ptr<nn::Module> model = nn::make_mlp();
  LocalSGD local_sgd(*model, group(), 64 << 10);
  manual_seed(1);
  const std::shared_ptr<nn::Module> rank_0s = nn::make_mlp();
  EXPECT_EQ(largest_difference(model->parameters(), rank_0s->parameters()), 0) << "rank " << rank;
  {
    NoGradGuard no_grad;
    for (Tensor& p : model->parameters()) p.fill_(rank);
  }
  local_sgd.average_parameters();
  for (const Tensor& p : model->parameters())
    EXPECT_EQ(largest_difference(p, Tensor::full(p.shape(), mean_rank)), 0) << "rank " << rank;
}

}  // namespace
}  // namespace weft::dist
