// Sharded checkpoints verified (train/checkpoint.h, io/sharded_checkpoint.h): every tampered
// checkpoint is refused by consolidate and by a resume alike, one line naming the file, the tensor
// and what was expected against what was found; the index's checksums catch a shard whose bytes
// changed or that was swapped for another; a checkpoint written before checksums still loads.
// One process: its world is one rank, which writes the only shard.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "cli/weft_cli.h"
#include "expect_error.h"
#include "foreign_safetensors.h"
#include "faulted_save.h"
#include "temp_dir.h"
#include "weft/core/random.h"
#include "weft/dist/process_group.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/safetensors.h"
#include "weft/io/sharded_checkpoint.h"
#include "weft/nn/gpt.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/train/checkpoint.h"

namespace weft::train {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::message_of;

const nn::GPTConfig kConfig{.layers = 1, .heads = 2, .dim = 16, .context = 8, .vocab = 19};

// A tiny GPT after one AdamW step, so that its optimizer state has moments to shard.
struct Trained {
  Trained() : model(kConfig), optimizer(model.parameters(), optim::AdamWOptions{.lr = 1e-2}) {
    sum(model(Tensor::from_vector(std::vector<int64_t>{1, 4, 2, 7}, {1, 4}))).backward();
    optimizer.step();
  }
  nn::GPT model;
  optim::AdamW optimizer;
};

Tensor flat(const Tensor& t) { return t.dim() == 0 ? t : t.contiguous().reshape({t.numel()}); }

// What the one rank writes of `trained`: views of its weights and state, as ZeRO's shards are.
CheckpointShard shard_of(Trained& trained) {
  CheckpointShard shard;
  for (const auto& [name, t] : trained.model.state_dict()) {
    shard.tensors[name] = flat(t);
    shard.layout[name] = {{"shape", t.shape()}, {"dtype", dtype_name(t.dtype())},
                          {"runs", nlohmann::json::array({nlohmann::json::array({0, 0, t.numel()})})}};
  }
  for (const auto& [key, t] : optimizer_state_io(trained.model, trained.optimizer).save()) shard.tensors[key] = flat(t);
  return shard;
}

TrainerState at_step(int64_t step) {
  TrainerState state;
  state.step = step;
  state.epoch = 1;
  return state;
}

std::map<std::string, std::string> gpt_metadata() {
  const nlohmann::json config = {{"layers", kConfig.layers}, {"heads", kConfig.heads}, {"dim", kConfig.dim},
                                 {"context", kConfig.context}, {"vocab", kConfig.vocab}, {"dropout", 0.0}};
  return {{"weft.gpt", config.dump()}, {"weft.tokenizer", "byte"}};
}

// Saves `trained` as a one-rank sharded checkpoint in `dir`, after `edit` changes what the rank writes.
void save(const std::string& dir, Trained& trained, const std::function<void(CheckpointShard&)>& edit = {}) {
  CheckpointShard shard = shard_of(trained);
  if (edit) edit(shard);
  save_sharded_checkpoint(dir, dist::ProcessGroup::world(), "gpt", "AdamW", shard, at_step(1), gpt_metadata());
}

// The weights `dir` resumes to.
std::map<std::string, std::vector<float>> resumed_weights(const std::string& dir) {
  Trained resumed;
  load_checkpoint(dir, resumed.model, "gpt", optimizer_state_io(resumed.model, resumed.optimizer));
  std::map<std::string, std::vector<float>> weights;
  for (const auto& [name, t] : resumed.model.state_dict()) weights[name] = t.to_vector<float>();
  return weights;
}

std::map<std::string, std::vector<float>> weights_of(const nn::Module& model) {
  std::map<std::string, std::vector<float>> weights;
  for (const auto& [name, t] : model.state_dict()) weights[name] = t.to_vector<float>();
  return weights;
}

std::string index_of(const std::string& dir) { return io::current_checkpoint(dir) + "/" + io::kShardIndex; }
std::string shard_of(const std::string& dir) { return io::shard_file(io::current_checkpoint(dir), 0, 1); }

void edit_index(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json index = nlohmann::json::parse(std::ifstream(index_of(dir)));
  edit(index);
  std::ofstream(index_of(dir)) << index.dump(1);
}

// Both readers of a sharded checkpoint refuse `dir` with a FormatError that says `says` (consolidate,
// which first checks a GPT's parameter count against its config, `consolidate_says` when given);
// consolidate writes nothing.
void expect_refused(const std::string& dir, const std::string& says, const std::string& consolidate_says = "") {
  SCOPED_TRACE(dir);
  std::string message = message_of<FormatError>([&] { consolidate_checkpoint(dir, dir + ".safetensors"); });
  EXPECT_TRUE(contains(message, consolidate_says.empty() ? says : consolidate_says)) << message;
  EXPECT_FALSE(fs::exists(dir + ".safetensors"));
  Trained resumed;
  message = message_of<FormatError>(
      [&] { load_checkpoint(dir, resumed.model, "gpt", optimizer_state_io(resumed.model, resumed.optimizer)); });
  EXPECT_TRUE(contains(message, says)) << message;
}

class ShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    manual_seed(1);
    save(path("saved"), saved_);
  }
  std::string path(const std::string& name) const { return dir_.file(name); }
  // A copy of the saved checkpoint, to tamper with.
  std::string copy(const std::string& name) const {
    fs::copy(path("saved"), path(name), fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    return path(name);
  }
  testing::TempDir dir_;
  Trained saved_;
};

TEST_F(ShardedCheckpoint, AnUntouchedCheckpointConsolidatesAndResumes) {
  consolidate_checkpoint(path("saved"), path("merged.safetensors"));
  const io::SafetensorsFile merged = io::load_safetensors(path("merged.safetensors"));
  const nn::StateDict expected = saved_.model.state_dict();
  ASSERT_EQ(merged.tensors.size(), expected.size());
  for (const auto& [name, t] : merged.tensors) EXPECT_EQ(t.to_vector<float>(), expected.at(name).to_vector<float>()) << name;

  manual_seed(2);
  Trained resumed;
  EXPECT_EQ(load_checkpoint(path("saved"), resumed.model, "gpt", optimizer_state_io(resumed.model, resumed.optimizer)).step, 1);
  for (const auto& [name, t] : resumed.model.state_dict())
    EXPECT_EQ(t.to_vector<float>(), expected.at(name).to_vector<float>()) << name;

  const nlohmann::json index = nlohmann::json::parse(std::ifstream(index_of(path("saved"))));
  EXPECT_EQ(index["checksums"], nlohmann::json::array({io::load_safetensors(shard_of(path("saved"))).metadata.at(io::kChecksumKey)}));
}

// A background sharded save (weft train --async-save under ZeRO, tp or pp) writes the state of its
// step: the shard holds views of the live weights and state, which the step after save_sharded
// changes while the thread writes.
TEST(ShardedBackgroundSave, WritesTheStateOfItsStepWhileTrainingGoesOn) {
  testing::TempDir dir;
  manual_seed(1);
  Trained training;
  const auto at_save = weights_of(training.model);
  CheckpointSaver saver(/*background=*/true);
  saver.save_sharded(dir.path(), dist::ProcessGroup::world(), "gpt", "AdamW", shard_of(training), at_step(1),
                     gpt_metadata());
  sum(training.model(Tensor::from_vector(std::vector<int64_t>{3, 1, 5, 2}, {1, 4}))).backward();
  training.optimizer.step();
  saver.wait();
  ASSERT_NE(weights_of(training.model), at_save);
  EXPECT_EQ(resumed_weights(dir.path()), at_save);
}

// Failing at any operation, in save_sharded (the staging directory) or in the thread (the shard,
// the index, trainer.json, the commit), a background sharded save throws the blocking one's
// IOError from save_sharded or the next wait(), and the previous checkpoint stays current.
TEST(ShardedBackgroundSave, FailingAtAnyOperationLeavesTheLastOneResumable) {
  manual_seed(1);
  Trained before;
  Trained after;
  sum(after.model(Tensor::from_vector(std::vector<int64_t>{3, 1, 5, 2}, {1, 4}))).backward();
  after.optimizer.step();
  int64_t n = 1, failed_in_background = 0;
  for (;; ++n) {
    testing::TempDir dir;
    save_sharded_checkpoint(dir.path(), dist::ProcessGroup::world(), "gpt", "AdamW", shard_of(before), at_step(1),
                            gpt_metadata());
    CheckpointSaver saver(/*background=*/true);
    const testing::FaultedSave f = testing::save_failing_at(
        n,
        [&] {
          saver.save_sharded(dir.path(), dist::ProcessGroup::world(), "gpt", "AdamW", shard_of(after), at_step(2),
                             gpt_metadata());
        },
        [&] { saver.wait(); });
    const std::string& message = f.message;
    if (message.empty()) {
      EXPECT_LT(f.seen, n) << "operation " << n << " was told to fail and the save passed";
      break;
    }
    SCOPED_TRACE("failed at operation " + std::to_string(n));
    failed_in_background += f.started;
    EXPECT_TRUE(contains(message, "No space left on device")) << message;
    const bool committed = resumed_weights(dir.path()) == weights_of(after.model);
    EXPECT_TRUE(committed || resumed_weights(dir.path()) == weights_of(before.model));
    saver.save_sharded(dir.path(), dist::ProcessGroup::world(), "gpt", "AdamW", shard_of(after), at_step(2),
                       gpt_metadata());
    saver.wait();
    EXPECT_EQ(resumed_weights(dir.path()), weights_of(after.model));
  }
  EXPECT_GT(n, 10) << "the shard's, the index's and trainer.json's writes, fsyncs and renames are all counted";
  EXPECT_GT(failed_in_background, 8) << "all but the staging directory fail in the thread";
}

// Checkpoints whose files agree with each other but not with the model.
TEST_F(ShardedCheckpoint, TensorsThatAreNotTheModelsAreRefusedNamingTheTensor) {
  const std::string prefix = "shards.json: the tensors do not fit a gpt: ";
  save(path("missing"), saved_, [](CheckpointShard& s) {
    std::erase_if(s.tensors, [](const auto& entry) { return entry.first.starts_with("wpe.weight"); });
    s.layout.erase("wpe.weight");
  });
  expect_refused(path("missing"), prefix + "it has no 'wpe.weight' (the model's is f32 [8, 16])",
                 "shards.json: weft.gpt describes a GPT of 3744 parameters (1 layers, dim 16, context 8, vocab 19) "
                 "but the file holds 3616");

  save(path("extra"), saved_, [](CheckpointShard& s) {
    s.tensors["extra.weight"] = Tensor::zeros({3});
    s.layout["extra.weight"] = {{"shape", nlohmann::json::array({3})}, {"dtype", "f32"}, {"runs", nlohmann::json::array({nlohmann::json::array({0, 0, 3})})}};
  });
  expect_refused(path("extra"), prefix + "'extra.weight' (f32 [3]) is not one of the model's tensors",
                 "but the file holds 3747");

  save(path("transposed"), saved_, [](CheckpointShard& s) { s.layout["wpe.weight"]["shape"] = nlohmann::json::array({16, 8}); });
  expect_refused(path("transposed"), prefix + "'wpe.weight' is [16, 8], the model's is [8, 16]");

  save(path("integers"), saved_, [](CheckpointShard& s) {
    s.tensors["wpe.weight"] = s.tensors["wpe.weight"].to(DType::i32);
    s.layout["wpe.weight"]["dtype"] = "i32";
  });
  expect_refused(path("integers"), prefix + "'wpe.weight' is i32, the model's is f32 (a floating dtype)");

  save(path("empty"), saved_, [](CheckpointShard& s) {
    s.tensors.clear();
    s.layout = nlohmann::json::object();
  });
  expect_refused(path("empty"), "shards.json: \"tensors\" is empty");
}

// Checkpoints changed after the save.
TEST_F(ShardedCheckpoint, AnIndexOrShardChangedAfterTheSaveIsRefusedNamingTheFile) {
  edit_index(copy("unknown_dtype"), [](nlohmann::json& i) { i["tensors"]["wpe.weight"]["dtype"] = "f31"; });
  expect_refused(path("unknown_dtype"), "shards.json: wpe.weight: \"dtype\" unknown dtype 'f31'");

  edit_index(copy("other_dtype"), [](nlohmann::json& i) { i["tensors"]["wpe.weight"]["dtype"] = "bf16"; });
  expect_refused(path("other_dtype"), "shard-00000-of-00001.safetensors: 'wpe.weight' is f32, " + index_of(path("other_dtype")) +
                                          " says bf16");

  // Each size within bounds, their product past them: it wrapped modulo 2^64 in the messages.
  edit_index(copy("wrapped"), [](nlohmann::json& i) {
    i["tensors"]["wpe.weight"]["shape"] = nlohmann::json::array({549759705088, 319368823267});
  });
  expect_refused(path("wrapped"), "shards.json: wpe.weight: \"shape\" [549759705088,319368823267] has more than 2^40 "
                                  "elements");

  edit_index(copy("unlisted"), [](nlohmann::json& i) { i["tensors"].erase("wpe.weight"); });
  expect_refused(path("unlisted"), "shard-00000-of-00001.safetensors holds 'wpe.weight', which " +
                                       index_of(path("unlisted")) + " does not list");

  edit_index(copy("listed"), [](nlohmann::json& i) {
    i["tensors"]["extra"] = {{"shape", nlohmann::json::array({3})}, {"dtype", "f32"}, {"runs", nlohmann::json::array({nlohmann::json::array({0, 0, 3})})}};
  });
  expect_refused(path("listed"), "shard-00000-of-00001.safetensors has no 'extra', which shards.json puts there");

  testing::flip_byte_from_end(shard_of(copy("flipped")), 5);
  expect_refused(path("flipped"), shard_of(path("flipped")) + ": its bytes do not match the checksum");

  // A shard rewritten whole, consistent with itself (a value changed, the same id): the index's checksum tells.
  io::SafetensorsFile shard = io::load_safetensors(shard_of(copy("replaced")));
  shard.tensors[0].second = shard.tensors[0].second.clone();
  shard.tensors[0].second.fill_(0.5);
  io::save_safetensors(shard_of(path("replaced")), shard.tensors, shard.metadata);
  expect_refused(path("replaced"), shard_of(path("replaced")) + ": its checksum is xxh3-64:");
  expect_refused(path("replaced"), "for rank 0's shard: the file was replaced since the checkpoint was saved");
}

// A checkpoint saved before checksums (no "checksums" in the index, no weft.checksum in the shard)
// loads as it did, unchecked.
TEST_F(ShardedCheckpoint, ACheckpointWrittenBeforeChecksumsStillLoads) {
  const std::string old = copy("old");
  edit_index(old, [](nlohmann::json& i) { i.erase("checksums"); });
  testing::edit_safetensors_header(shard_of(old), [](nlohmann::ordered_json& h) { h["__metadata__"].erase(io::kChecksumKey); });
  consolidate_checkpoint(old, path("old.safetensors"));
  Trained resumed;
  EXPECT_EQ(load_checkpoint(old, resumed.model, "gpt", optimizer_state_io(resumed.model, resumed.optimizer)).step, 1);
}

// Two ranks' shards of an 8-element tensor, written by hand: runs that overlap (yet hold 8
// elements in all, so some element is in none), and a shard saved at another step than the index.
TEST(ShardIndex, OverlappingRunsAndAShardOfAnotherStepAreRefused) {
  testing::TempDir dir;
  auto write = [&](const nlohmann::json& runs, const std::string& second_step) {
    std::vector<std::string> checksums;
    for (int r = 0; r < 2; ++r)
      checksums.push_back(io::save_safetensors(io::shard_file(dir.path(), r, 2), {{"w", Tensor::ones({4})}},
                                               {{io::kShardCheckpointId, "7"}, {"weft.step", r == 0 ? "1" : second_step}}));
    io::write_shard_index(dir.path(), 1, "7", {}, checksums,
                          {{"w", {{"shape", nlohmann::json::array({8})}, {"dtype", "f32"}, {"runs", runs}}}});
  };
  write(nlohmann::json::array({nlohmann::json::array({0, 0, 4}), nlohmann::json::array({1, 4, 4})}), "1");
  EXPECT_EQ(io::merge_shards(dir.path()).tensors.at(0).second.to_vector<float>(), std::vector<float>(8, 1));

  write(nlohmann::json::array({nlohmann::json::array({0, 0, 4}), nlohmann::json::array({1, 2, 4})}), "1");
  std::string message = message_of<FormatError>([&] { io::merge_shards(dir.path()); });
  EXPECT_TRUE(contains(message, "shards.json: w: two runs both hold elements 2 to 3, so others are in none")) << message;

  write(nlohmann::json::array({nlohmann::json::array({0, 0, 4}), nlohmann::json::array({1, 4, 4})}), "2");
  message = message_of<FormatError>([&] { io::merge_shards(dir.path()); });
  EXPECT_TRUE(contains(message, "shard-00001-of-00002.safetensors was saved at step 2, " + dir.path() +
                                    "/shards.json at step 1")) << message;
}

TEST_F(ShardedCheckpoint, ConsolidateOfATamperedCheckpointIsOneLineOfTheCli) {
  testing::flip_byte_from_end(shard_of(copy("flipped")), 1);
  testing::expect_usage_error(testing::weft_cli("ckpt consolidate " + path("flipped") + " --out " + path("f.safetensors")),
                              shard_of(path("flipped")) + ": its bytes do not match the checksum");
  EXPECT_FALSE(fs::exists(path("f.safetensors")));
}

}  // namespace
}  // namespace weft::train
