// weft train under mpirun is data parallel: N ranks at batch B / N each reach the parameters one
// process reaches at batch B. Rank 0 trains the one-process reference with the `weft` executable,
// outside the launch (the launcher's variables removed, so it is rank 0 of 1), then every rank
// trains in-process over the world group and rank 0 compares the two checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

#include "weft/dist/process_group.h"
#include "weft/io/safetensors.h"
#include "weft/train/trainer.h"

namespace weft::dist {
namespace {

ProcessGroup& group() { return ProcessGroup::world(); }

// A directory every rank names the same: rank 0's number for it, broadcast.
std::string shared_directory(const char* what) {
  Tensor id = Tensor::scalar(static_cast<double>(std::random_device{}() % 1000000000), DType::i64);
  group().broadcast(id, 0);
  return str("/tmp/weft_ddp_", what, "_", static_cast<int64_t>(id.item()));
}

double largest_difference(const std::string& a, const std::string& b) {
  const io::SafetensorsFile x = io::load_safetensors(a), y = io::load_safetensors(b);
  EXPECT_EQ(x.tensors.size(), y.tensors.size());
  double worst = 0;
  for (size_t k = 0; k < x.tensors.size() && k < y.tensors.size(); ++k) {
    EXPECT_EQ(x.tensors[k].first, y.tensors[k].first);
    const std::vector<double> u = x.tensors[k].second.to_vector<double>(), v = y.tensors[k].second.to_vector<double>();
    for (size_t i = 0; i < u.size() && i < v.size(); ++i) worst = std::max(worst, std::abs(u[i] - v[i]));
  }
  return worst;
}

struct Case {
  const char* name;
  std::string flags;  // as `weft train` takes them
  train::TrainOptions options;
  double tolerance;
};

// A 2-block GPT on random tokens, AdamW with clipping at 1 (the GPT's defaults), two micro-batches.
train::TrainOptions tiny_gpt(int64_t steps) {
  train::TrainOptions gpt;
  gpt.model = "gpt";
  gpt.text.data = {"random"};
  gpt.text.layers = 2;
  gpt.text.heads = 2;
  gpt.text.dim = 32;
  gpt.text.context = 16;
  gpt.text.vocab = 64;
  gpt.steps = steps;
  gpt.batch_size = 16;
  gpt.grad_accum = 2;
  return gpt;
}

TEST(TrainDDP, RanksAtTheirShareOfTheBatchReachTheOneProcessParameters) {
  const int rank = group().rank(), size = group().size();
  train::TrainOptions mlp;
  mlp.model = "mlp";
  mlp.steps = 6;
  mlp.batch_size = 64;
  mlp.eval_every = 0;
  mlp.optimizer = optim::OptimizerKind::momentum;
  mlp.lr = 0.05;
  train::TrainOptions cnn;
  cnn.model = "cnn";
  cnn.steps = 4;
  cnn.batch_size = 32;
  cnn.eval_every = 0;
  const train::TrainOptions gpt = tiny_gpt(6);
  // AdamW divides each gradient by its own running size, so rounding differences in tiny
  // gradients move parameters by more than plain SGD lets them.
  const Case cases[] = {
      {"mlp", "--model mlp --steps 6 --batch-size 64 --eval-every 0 --optimizer momentum --lr 0.05", mlp, 1e-6},
      {"cnn", "--model cnn --steps 4 --batch-size 32 --eval-every 0", cnn, 1e-5},
      {"gpt", "--model gpt --data random --layers 2 --heads 2 --dim 32 --context 16 --vocab 64 --steps 6 "
              "--batch-size 16 --grad-accum 2", gpt, 1e-4},
  };
  for (const Case& c : cases) {
    const std::string dir = shared_directory(c.name);
    if (rank == 0) {
      const std::string command = str("env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_SIZE ", WEFT_CLI_PATH, " train ",
                                      c.flags, " --threads 1 --out ", dir, "/single >", dir, ".log 2>&1");
      EXPECT_EQ(std::system(command.c_str()), 0) << command;
    }
    group().barrier();
    train::TrainOptions o = c.options;
    o.threads = 1;
    o.out_dir = dir + "/ddp";
    std::ostringstream log;
    const train::TrainResult r = train::train(o, log, false);
    EXPECT_EQ(r.steps, *o.steps) << c.name << " rank " << rank;
    if (rank == 0) {
      EXPECT_LT(largest_difference(dir + "/single/model.safetensors", dir + "/ddp/model.safetensors"), c.tolerance)
          << c.name << " on " << size << " ranks";
      EXPECT_NE(log.str().find(str("on ", size, " ranks")), std::string::npos) << log.str();
      std::filesystem::remove_all(dir);
      std::filesystem::remove(dir + ".log");
    }
    EXPECT_TRUE(rank == 0 || log.str().empty()) << "rank " << rank << " printed: " << log.str();
    group().barrier();
  }
}

// ZeRO at every stage takes the steps DDP takes: the same parameters, and a checkpoint holding the
// same one-process optimizer state (gathered from the shards). Bit for bit where the sums are the
// same; stages 2 and 3 reduce each micro-batch before adding them (DDP adds, then reduces), and
// reduce-scatter may add 4 ranks' gradients in another order than all-reduce.
TEST(TrainZeRO, EveryStageTakesDDPsStepsAndSavesWhatOneProcessWould) {
  const int rank = group().rank(), size = group().size();
  train::TrainOptions mlp;
  mlp.model = "mlp";
  mlp.steps = 4;
  mlp.batch_size = 64;
  mlp.eval_every = 0;
  const train::TrainOptions gpt = tiny_gpt(4);
  train::TrainOptions gpt_bf16 = gpt;
  gpt_bf16.precision = amp::Precision::bf16;
  train::TrainOptions gpt_masters = gpt_bf16;  // bf16 parameters and gradients, f32 masters
  gpt_masters.master_weights = true;
  gpt_masters.grad_accum = 1;
  const std::pair<const char*, train::TrainOptions> cases[] = {
      {"mlp", mlp}, {"gpt", gpt}, {"gpt_bf16", gpt_bf16}, {"gpt_master_weights", gpt_masters}};
  for (const auto& [name, options] : cases) {
    const std::string dir = shared_directory(name);
    std::ostringstream log;
    for (const char* mode : {"ddp", "zero1", "zero2", "zero3"}) {
      train::TrainOptions o = options;
      o.threads = 1;
      o.parallel = mode;
      o.out_dir = str(dir, "/", mode);
      EXPECT_EQ(train::train(o, log, false).steps, *o.steps) << name << " " << mode;
    }
    if (rank == 0) {
      for (const char* mode : {"zero1", "zero2", "zero3"}) {
        // Stage 1 reduces what DDP reduces; bf16 sums round to 8 bits of mantissa.
        const bool same_sums = std::string(mode) == "zero1" || (options.grad_accum == 1 && size == 2);
        const double tolerance = same_sums ? 0 : options.precision == amp::Precision::bf16 ? 1e-3 : 1e-5;
        for (const char* file : {"model.safetensors", "optimizer.safetensors"})
          EXPECT_LE(largest_difference(str(dir, "/ddp/", file), str(dir, "/", mode, "/", file)), tolerance)
              << name << " " << mode << " " << file << " on " << size << " ranks";
      }
      EXPECT_NE(log.str().find(str("ZeRO-3 on ", size, " ranks")), std::string::npos) << log.str();
      std::filesystem::remove_all(dir);
    }
    group().barrier();
  }
}

}  // namespace
}  // namespace weft::dist
