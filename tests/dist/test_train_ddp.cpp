// weft train under mpirun is data parallel: N ranks at batch B / N each reach the parameters one
// process reaches at batch B. Rank 0 trains the one-process reference with the `weft` executable,
// outside the launch (the launcher's variables removed, so it is rank 0 of 1), then every rank
// trains in-process over the world group and rank 0 compares the two checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>

#include "weft/dist/process_group.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/safetensors.h"
#include "weft/io/sharded_checkpoint.h"
#include "weft/train/checkpoint.h"
#include "weft/train/trainer.h"

#include "dist/largest_difference.h"

namespace weft::dist {
namespace {

using testing::largest_difference;

ProcessGroup& group() { return ProcessGroup::world(); }

// A directory every rank names the same: rank 0's number for it, broadcast.
std::string shared_directory(const char* what) {
  Tensor id = Tensor::scalar(static_cast<double>(std::random_device{}() % 1000000000), DType::i64);
  group().broadcast(id, 0);
  return str("/tmp/weft_ddp_", what, "_", static_cast<int64_t>(id.item()));
}

std::map<std::string, Tensor> tensors_in(const std::string& file) {
  const io::SafetensorsFile f = io::load_safetensors(file);
  return {f.tensors.begin(), f.tensors.end()};
}

double largest_difference(const std::string& a, const std::string& b) {
  return largest_difference(tensors_in(a), tensors_in(b));
}

// Trains `o` for `steps` steps over `g` into `out`, resumed from `resume` unless empty; the log.
std::string train_run(ProcessGroup& g, train::TrainOptions o, int64_t steps, const std::string& out,
                      const std::string& resume) {
  o.steps = steps;
  o.out_dir = out;
  o.resume_dir = resume;
  std::ostringstream log;
  EXPECT_EQ(train::train(o, log, false, g).steps, steps) << out << ": " << log.str();
  return log.str();
}

// Each named run's sharded checkpoint in `dir`, its shards merged, holds the parameters and the
// optimizer state one process saved in dir/single; and one process resumed from the split run's
// dir/half reached dir/single's parameters too (dir/resumed_single).
void expect_split_runs_hold_one_processs_state(const std::string& dir, const std::vector<std::string>& names) {
  const auto single_model = tensors_in(dir + "/single/model.safetensors");
  const auto single_state = tensors_in(dir + "/single/optimizer.safetensors");
  for (const std::string& name : names) {
    const io::MergedShards merged = io::merge_shards(io::current_checkpoint(dir + "/" + name));
    EXPECT_LE(largest_difference(single_model, {merged.tensors.begin(), merged.tensors.end()}), 1e-5)
        << name << " parameters on " << group().size() << " ranks";
    EXPECT_LE(largest_difference(single_state, merged.companions), 1e-5) << name << " optimizer state";
  }
  EXPECT_LE(largest_difference(dir + "/single/model.safetensors", dir + "/resumed_single/model.safetensors"), 1e-5);
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
  gpt.model = nn::ModelKind::gpt;
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
  mlp.model = nn::ModelKind::mlp;
  mlp.steps = 6;
  mlp.batch_size = 64;
  mlp.eval_every = 0;
  mlp.optimizer = optim::OptimizerKind::momentum;
  mlp.lr = 0.05;
  train::TrainOptions cnn;
  cnn.model = nn::ModelKind::cnn;
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

// ZeRO at every stage takes the steps DDP takes: the same parameters, and a sharded checkpoint
// whose runs put together are DDP's one-process model and optimizer state. Bit for bit where the sums are the
// same; stages 2 and 3 reduce each micro-batch before adding them (DDP adds, then reduces), and
// reduce-scatter may add 4 ranks' gradients in another order than all-reduce.
TEST(TrainZeRO, EveryStageTakesDDPsStepsAndSavesWhatOneProcessWould) {
  const int rank = group().rank(), size = group().size();
  train::TrainOptions mlp;
  mlp.model = nn::ModelKind::mlp;
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
    // On 4 ranks (where only the order of the sums changes) the GPT in fp32 and with master
    // weights; the sanitizer build's time goes on the 2-rank run's full set.
    if (size > 2 && (options.model == nn::ModelKind::mlp || (options.precision == amp::Precision::bf16 && !options.master_weights)))
      continue;
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
        // ZeRO's checkpoint is sharded: its runs put together are one process's model and state.
        const io::MergedShards merged = io::merge_shards(io::current_checkpoint(str(dir, "/", mode)));
        EXPECT_LE(largest_difference(tensors_in(dir + "/ddp/model.safetensors"), {merged.tensors.begin(), merged.tensors.end()}),
                  tolerance) << name << " " << mode << " parameters on " << size << " ranks";
        EXPECT_LE(largest_difference(tensors_in(dir + "/ddp/optimizer.safetensors"), merged.companions), tolerance)
            << name << " " << mode << " optimizer state on " << size << " ranks";
      }
      EXPECT_NE(log.str().find(str("ZeRO-3 on ", size, " ranks")), std::string::npos) << log.str();
      std::filesystem::remove_all(dir);
    }
    group().barrier();
  }
}

// Tensor parallel (--parallel tp), alone on 2 and 4 ranks and with 2 data-parallel replicas on 4,
// takes one process's steps: the sharded checkpoint's runs (strided, for the split matrices) put
// together are one process's model and optimizer state. A run saved at one tensor-parallel size
// resumes at another and goes on as if never stopped.
TEST(TrainTensorParallel, SplitLayersTakeOneProcesssStepsAndResumeAtAnySize) {
  const int rank = group().rank(), size = group().size();
  const std::unique_ptr<ProcessGroup> one = group().split(rank, 0);
  const std::string dir = shared_directory("tp");
  train::TrainOptions o = tiny_gpt(4);
  o.text.heads = 4;
  o.threads = 1;
  o.schedule = "constant";  // the same rate whatever the planned steps, so that runs of 2 and 4 steps agree
  o.clip_grad = 0.01;  // below the gradients' norm: every step is clipped by the norm over the split model
  auto run = [&](ProcessGroup& g, int64_t tp, int64_t steps, const std::string& out, const std::string& resume) {
    train::TrainOptions r = o;
    r.parallel = tp > 1 ? "tp" : "";
    r.tp = tp;
    return train_run(g, r, steps, out, resume);
  };
  if (rank == 0) run(*one, 1, 4, dir + "/single", "");
  std::vector<std::string> names;
  for (int64_t tp = 2; tp <= size; tp *= 2) {
    const std::string name = str("tp", tp);
    names.push_back(name);
    const std::string log = run(group(), tp, 4, dir + "/" + name, "");
    if (rank == 0) {
      EXPECT_NE(log.find(str("tensor parallel over ", tp, " ranks")), std::string::npos) << log;
      if (size / tp == 2) {
        EXPECT_NE(log.find("ranks: tensor-parallel groups [0 1] [2 3]; data-parallel groups [0 2] [1 3]"), std::string::npos)
            << log;
      }
    }
  }
  // Saved at tp 2 after 2 steps, resumed at tp = size (and on 4 ranks also at 1) for 2 more.
  run(group(), 2, 2, dir + "/half", "");
  run(group(), size, 4, dir + "/resumed", dir + "/half");
  names.push_back("resumed");
  if (rank == 0) {
    run(*one, 1, 4, dir + "/resumed_single", dir + "/half");
    expect_split_runs_hold_one_processs_state(dir, names);
    std::filesystem::remove_all(dir);
  }
  group().barrier();
}

// Pipeline parallel (--parallel pp) with either schedule, alone on 2 and 4 ranks and with 2 data-
// parallel replicas on 4, takes one process's steps; its sharded checkpoint resumes in one process
// and at another number of stages.
TEST(TrainPipeline, StagesTakeOneProcesssStepsWithEitherScheduleAndResume) {
  const int rank = group().rank(), size = group().size();
  const std::unique_ptr<ProcessGroup> one = group().split(rank, 0);
  const std::string dir = shared_directory("pp");
  train::TrainOptions o = tiny_gpt(4);
  o.text.layers = 4;
  o.grad_accum = 4;
  o.threads = 1;
  o.schedule = "constant";
  o.clip_grad = 0.01;  // every step clipped by the norm over all the stages
  auto run = [&](ProcessGroup& g, int64_t pp, const char* schedule, int64_t steps, const std::string& out,
                 const std::string& resume) {
    train::TrainOptions r = o;
    r.parallel = pp > 1 ? "pp" : "";
    r.pp = pp;
    r.pp_schedule = schedule;
    return train_run(g, r, steps, out, resume);
  };
  if (rank == 0) run(*one, 1, "1f1b", 4, dir + "/single", "");
  std::vector<std::string> names;
  for (int64_t pp : {int64_t{2}, int64_t{size}}) {
    for (const char* schedule : {"gpipe", "1f1b"}) {
      const std::string name = str("pp", pp, "_", schedule);
      if (std::find(names.begin(), names.end(), name) != names.end()) continue;
      names.push_back(name);
      const std::string log = run(group(), pp, schedule, 4, dir + "/" + name, "");
      if (rank == 0 && size / pp == 2) {
        EXPECT_NE(log.find("ranks: pipeline groups (stage by stage) [0 2] [1 3]; data-parallel groups [0 1] [2 3]"),
                  std::string::npos) << log;
      }
    }
  }
  run(group(), 2, "gpipe", 2, dir + "/half", "");
  run(group(), size, "1f1b", 4, dir + "/resumed", dir + "/half");
  names.push_back("resumed");
  if (rank == 0) {
    run(*one, 1, "1f1b", 4, dir + "/resumed_single", dir + "/half");
    expect_split_runs_hold_one_processs_state(dir, names);
    std::filesystem::remove_all(dir);
  }
  group().barrier();
}

// The splits combined on 4 ranks (--parallel tp,pp; zero1,tp and zero1,pp, ZeRO-1 sharding the
// optimizer states over the 2 replicas of the split model) take one process's steps, with every
// step clipped by the norm over the whole model; a ZeRO-1 run's checkpoint resumes as tp 2 x pp 2
// and in one process.
TEST(TrainModelParallel, CombinedSplitsTakeOneProcesssStepsAndResume) {
  const int rank = group().rank(), size = group().size();
  if (size != 4) GTEST_SKIP() << "lays 2 x 2 ranks out";
  const std::unique_ptr<ProcessGroup> one = group().split(rank, 0);
  const std::string dir = shared_directory("3d");
  train::TrainOptions o = tiny_gpt(4);
  o.text.layers = 4;
  o.text.heads = 4;
  o.grad_accum = 4;
  o.threads = 1;
  o.schedule = "constant";
  o.clip_grad = 0.01;
  auto run = [&](ProcessGroup& g, const char* parallel, int64_t tp, int64_t pp, int64_t steps, const std::string& out,
                 const std::string& resume) {
    train::TrainOptions r = o;
    r.parallel = parallel;
    r.tp = tp;
    r.pp = pp;
    return train_run(g, r, steps, out, resume);
  };
  if (rank == 0) run(*one, "", 1, 1, 4, dir + "/single", "");
  const std::string split = run(group(), "tp,pp", 2, 2, 4, dir + "/tp_pp", "");
  const std::string zero_tp = run(group(), "zero1,tp", 2, 1, 4, dir + "/zero1_tp", "");
  const std::string zero_pp = run(group(), "zero1,pp", 1, 2, 4, dir + "/zero1_pp", "");
  run(group(), "zero1,tp", 2, 1, 2, dir + "/half", "");
  run(group(), "tp,pp", 2, 2, 4, dir + "/resumed", dir + "/half");
  if (rank == 0) {
    EXPECT_NE(split.find("ranks: tensor-parallel groups [0 1] [2 3]; pipeline groups (stage by stage) [0 2] [1 3]\n"),
              std::string::npos) << split;
    EXPECT_NE(zero_tp.find("ZeRO-1 on 2 data-parallel replicas"), std::string::npos) << zero_tp;
    EXPECT_NE(zero_pp.find("ranks: pipeline groups (stage by stage) [0 2] [1 3]; data-parallel groups [0 1] [2 3]"),
              std::string::npos) << zero_pp;
    run(*one, "", 1, 1, 4, dir + "/resumed_single", dir + "/half");
    expect_split_runs_hold_one_processs_state(dir, {"tp_pp", "zero1_tp", "zero1_pp", "resumed"});
    std::filesystem::remove_all(dir);
  }
  group().barrier();
}

// Communicating less. --grad-compress bf16 takes DDP's steps within what 16-bit gradients hold and
// says its bytes, half of f32's. --sync-every 3 (local SGD): the ranks step apart, so after step 4
// (one step past an average) their parameters differ; the run ends averaged, every rank holding
// the same parameters, which are not DDP's.
TEST(TrainDDP, CompressedGradientsAndLocalSgd) {
  const int rank = group().rank(), size = group().size();
  const std::string dir = shared_directory("less");
  train::TrainOptions o;
  o.model = nn::ModelKind::mlp;
  o.steps = 4;
  o.batch_size = 64;
  o.eval_every = 0;
  o.optimizer = optim::OptimizerKind::sgd;
  o.lr = 0.05;
  o.threads = 1;
  auto run = [&](const std::string& name, const std::string& compress, int64_t sync_every, int64_t steps) {
    train::TrainOptions r = o;
    r.grad_compress = compress;
    r.sync_every = sync_every;
    r.steps = steps;
    r.out_dir = str(dir, "/", name);
    std::ostringstream log;
    const train::TrainResult result = train::train(r, log, false);
    EXPECT_EQ(result.steps, steps) << name;
    return std::pair{log.str(), result};
  };
  const auto [ddp_log, ddp] = run("ddp", "", 1, 4);
  const auto [bf16_log, bf16] = run("bf16", "bf16", 1, 4);
  const auto [local_log, local] = run("local", "", 3, 4);
  // Each rank evaluates its own parameters: the same loss on every rank, once they are averaged.
  Tensor loss = Tensor::scalar(local.evaluation["test_loss"].get<double>(), DType::f64);
  Tensor losses = Tensor::empty({size}, DType::f64);
  group().all_gather(loss, losses);
  for (double l : losses.to_vector<double>()) EXPECT_EQ(l, loss.item()) << "rank " << rank;
  if (rank == 0) {
    EXPECT_NE(local_log.find("parameters averaged every 3 steps"), std::string::npos) << local_log;
    EXPECT_EQ(2 * bf16.setup["all_reduced_bytes_per_step"].get<int64_t>(), ddp.setup["all_reduced_bytes_per_step"].get<int64_t>());
    EXPECT_NE(bf16_log.find(" per step in bf16"), std::string::npos) << bf16_log;
    const double bf16_off = largest_difference(dir + "/ddp/model.safetensors", dir + "/bf16/model.safetensors");
    EXPECT_GT(bf16_off, 0);
    EXPECT_LT(bf16_off, 1e-3);
    EXPECT_GT(largest_difference(dir + "/ddp/model.safetensors", dir + "/local/model.safetensors"), 1e-4)
        << "local SGD took DDP's steps";
  }
  group().barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
}

// A tensor dict's bits: name -> bytes.
std::map<std::string, std::string> bits(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::map<std::string, std::string> out;
  for (const auto& [name, t] : tensors) out[name].assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return out;
}

// A ZeRO checkpoint is one shard per rank and resumes on any number of ranks. Saved by 2 ranks
// under ZeRO-3 and resumed without taking a step by 1 rank, 1 -> 2 (ZeRO-2), and on 4 ranks 2 -> 4
// (ZeRO-1) -> 2 (ZeRO-3), every checkpoint holds the same parameters, bit for bit, and two steps on
// from the last give the bits of four steps without a stop.
TEST(ZeroCheckpoint, ResumesOnAnyNumberOfRanksWithTheSameBits) {
  const int rank = group().rank(), size = group().size();
  const std::unique_ptr<ProcessGroup> one = group().split(rank, 0), two = group().split(rank / 2, rank);
  const std::string base = shared_directory("reshard"), pair = str(base, "_", rank / 2);
  train::TrainOptions o = tiny_gpt(2);
  o.precision = amp::Precision::bf16;
  o.master_weights = true;
  o.threads = 1;
  o.schedule = "constant";  // the same rate whatever the planned steps, so that runs of 2 and 4 steps agree
  auto run = [&](ProcessGroup& g, const char* parallel, const std::string& out, const std::string& resume,
                 int64_t steps = 2) {
    train::TrainOptions r = o;
    r.steps = steps;
    r.parallel = parallel;
    r.out_dir = out;
    r.resume_dir = resume;
    std::ostringstream log;
    EXPECT_EQ(train::train(r, log, false, g).steps, steps) << out << ": " << log.str();
  };
  run(*two, "zero3", pair + "/a2", "");
  if (rank % 2 == 0) run(*one, "", pair + "/b1", pair + "/a2");
  two->barrier();
  run(*two, "zero2", pair + "/c2", pair + "/b1");
  std::vector<std::string> sharded = {pair + "/a2", pair + "/c2"};
  if (size == 4) {
    run(group(), "zero1", base + "_0/d4", base + "_0/a2");
    run(*two, "zero3", pair + "/e2", base + "_0/d4");
    sharded.insert(sharded.end(), {base + "_0/d4", pair + "/e2"});
  }
  // And training on from the resharded checkpoint takes the steps of a run never interrupted.
  run(*two, "zero3", pair + "/f4", sharded.back(), 4);
  run(*two, "zero3", pair + "/g4", "", 4);
  group().barrier();
  if (rank % 2 == 0) {
    train::consolidate_checkpoint(pair + "/f4", pair + "/f4.safetensors");
    train::consolidate_checkpoint(pair + "/g4", pair + "/g4.safetensors");
    EXPECT_TRUE(bits(io::load_safetensors(pair + "/f4.safetensors").tensors) ==
                bits(io::load_safetensors(pair + "/g4.safetensors").tensors)) << "on " << size << " ranks";
    const auto single = bits(io::load_safetensors(pair + "/b1/model.safetensors").tensors);
    EXPECT_EQ(single.size(), 28u);
    for (const std::string& dir : sharded) {
      train::consolidate_checkpoint(dir, dir + ".safetensors");
      EXPECT_TRUE(bits(io::load_safetensors(dir + ".safetensors").tensors) == single) << dir << " on " << size << " ranks";
    }
  }
  // A shard missing, or one from another save: refused on every rank, naming the file; nothing written.
  if (rank % 2 == 0) {
    std::filesystem::create_directory(pair + "/missing");
    std::filesystem::copy(pair + "/a2/step-00000002", pair + "/missing/step-00000002", std::filesystem::copy_options::recursive);
    std::filesystem::create_directory_symlink("step-00000002", pair + "/missing/latest");
    std::filesystem::remove(pair + "/missing/step-00000002/shard-00001-of-00002.safetensors");
    std::filesystem::create_directory(pair + "/mixed");
    std::filesystem::copy(pair + "/a2/step-00000002", pair + "/mixed/step-00000002", std::filesystem::copy_options::recursive);
    std::filesystem::create_directory_symlink("step-00000002", pair + "/mixed/latest");
    std::filesystem::copy_file(pair + "/c2/latest/shard-00001-of-00002.safetensors",
                               pair + "/mixed/step-00000002/shard-00001-of-00002.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
  }
  two->barrier();
  train::TrainOptions resume = o;
  resume.parallel = "zero2";
  resume.resume_dir = pair + "/missing";
  std::ostringstream log;
  try {
    train::train(resume, log, false, *two);
    ADD_FAILURE() << "resumed from a checkpoint missing a shard";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("is missing the shard of rank 1 of 2"), std::string::npos) << e.what();
  }
  if (rank % 2 == 0) {
    try {
      train::consolidate_checkpoint(pair + "/mixed", pair + "/mixed.safetensors");
      ADD_FAILURE() << "merged shards of two saves";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("belongs to another checkpoint"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(pair + "/mixed.safetensors"));
  }
  group().barrier();
  if (rank % 2 == 0) std::filesystem::remove_all(pair);
}

}  // namespace
}  // namespace weft::dist
