// Training checkpoints (train/checkpoint.h): a save that fails at any write, fsync or rename, or
// on a full filesystem, blocking or in the background, leaves the previous checkpoint resuming to
// exactly its state; optimizer
// state is saved under the model's parameter names, checkpoints keyed by position (written
// before) still resume to the same state, and a name the model does not have is an error that
// says which.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "../expect_error.h"
#include "../temp_dir.h"
#include "faulted_save.h"
#include "weft/io/atomic_file.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/fault.h"
#include "weft/io/safetensors.h"
#include "weft/nn/gpt.h"
#include "weft/core/random.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/train/checkpoint.h"

namespace weft::train {
namespace {

using testing::contains;
using testing::message_of;

const nn::GPTConfig kConfig{.layers = 2, .heads = 2, .dim = 16, .context = 8, .vocab = 19};

// A tiny GPT (its output projection tied to wte) and an AdamW over its parameters, after two steps.
struct TrainedGpt {
  TrainedGpt() : model(kConfig), optimizer(model.parameters(), optim::AdamWOptions{.lr = 1e-2}) {
    for (int s = 0; s < 2; ++s) step();
  }
  void step() {
    optimizer.zero_grad();
    Tensor tokens = Tensor::from_vector(std::vector<int64_t>{1, 4, 2, 7, 3, 9}, {1, 6});
    sum(model(tokens)).backward();
    optimizer.step();
  }
  nn::GPT model;
  optim::AdamW optimizer;
};

TrainerState at_step(int64_t step) {
  TrainerState state;
  state.step = step;
  return state;
}

// The current checkpoint's optimizer.safetensors, replaced in place by the tests that rewrite it.
std::string optimizer_file(const testing::TempDir& dir) {
  return io::current_checkpoint(dir.path()) + "/optimizer.safetensors";
}

// Writes the checkpoint's optimizer.safetensors with `state` and the metadata checkpoints had before names.
void save_positional(const testing::TempDir& dir, const std::map<std::string, Tensor>& state, int64_t step) {
  io::save_safetensors(optimizer_file(dir), {state.begin(), state.end()},
                       {{"weft.optimizer", "AdamW"}, {"weft.step", std::to_string(step)}});
}

void expect_same_state(const optim::Optimizer& a, const optim::Optimizer& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t i = 0; i < a.params().size(); ++i) {
    EXPECT_EQ(a.step_count(i), b.step_count(i)) << "parameter " << i;
    optim::NamedTensors sa = a.state(i), sb = b.state(i);
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t k = 0; k < sa.size(); ++k)
      EXPECT_EQ(sa[k].second.to_vector<float>(), sb[k].second.to_vector<float>()) << "parameter " << i << " " << sa[k].first;
  }
}

TEST(TrainCheckpoint, OptimizerStateIsKeyedByParameterName) {
  testing::TempDir dir;
  TrainedGpt run;
  save_checkpoint(dir.path(), run.model, "gpt", run.optimizer, at_step(2));

  io::SafetensorsFile file = io::load_safetensors(optimizer_file(dir));
  EXPECT_EQ(file.metadata.at("weft.optimizer_keys"), "parameter names");
  std::set<std::string> keys;
  for (const auto& [key, tensor] : file.tensors) keys.insert(key);
  std::set<std::string> expected;
  for (const auto& [name, tensor] : run.model.named_parameters())
    for (const char* field : {"step", "exp_avg", "exp_avg_sq"}) expected.insert(name + "." + field);
  EXPECT_EQ(keys, expected);
  EXPECT_TRUE(keys.count("wte.weight.exp_avg"));  // the tied output projection has no key of its own
  EXPECT_TRUE(keys.count("h.1.attn.c_attn.weight.exp_avg_sq"));

  TrainedGpt resumed;
  resumed.step();  // different state, which loading must replace
  load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer);
  expect_same_state(run.optimizer, resumed.optimizer);
}

TEST(TrainCheckpoint, PositionalOptimizerStateStillResumes) {
  testing::TempDir dir;
  TrainedGpt run;
  save_checkpoint(dir.path(), run.model, "gpt", run.optimizer, at_step(2));
  save_positional(dir, run.optimizer.state_dict(), 2);  // "0.exp_avg", "0.step", ... as weft wrote them before
  ASSERT_EQ(io::load_safetensors(optimizer_file(dir)).metadata.count("weft.optimizer_keys"), 0u);

  TrainedGpt resumed;
  resumed.step();
  load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer);
  expect_same_state(run.optimizer, resumed.optimizer);
  run.step();
  resumed.step();
  const auto a = run.model.named_parameters(), b = resumed.model.named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>()) << a[i].first;
}

TEST(TrainCheckpoint, UnknownOrIncompleteParameterStateNamesTheParameter) {
  testing::TempDir dir;
  TrainedGpt run;
  save_checkpoint(dir.path(), run.model, "gpt", run.optimizer, at_step(2));
  const io::SafetensorsFile saved = io::load_safetensors(optimizer_file(dir));
  auto rewrite = [&](const std::string& drop, const std::string& rename_to) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [key, tensor] : saved.tensors) {
      if (key != drop) tensors.emplace_back(key, tensor);
      else if (!rename_to.empty()) tensors.emplace_back(rename_to, tensor);
    }
    io::save_safetensors(optimizer_file(dir), tensors, saved.metadata);
  };

  TrainedGpt resumed;
  rewrite("ln_f.bias.step", "final_norm.bias.step");
  std::string renamed = message_of<ValueError>([&] { load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer); });
  EXPECT_TRUE(contains(renamed, "'final_norm.bias'")) << renamed;
  EXPECT_TRUE(contains(renamed, "no parameter of that name")) << renamed;

  rewrite("h.0.mlp.c_fc.weight.exp_avg", "");
  std::string missing = message_of<ValueError>([&] { load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer); });
  EXPECT_TRUE(contains(missing, "'h.0.mlp.c_fc.weight'")) << missing;
  EXPECT_TRUE(contains(missing, "exp_avg")) << missing;
}

void expect_same_weights(const nn::Module& a, const nn::Module& b) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << pa[i].first;
}

// The step `dir` resumes at, after checking that it resumes to exactly `before`'s state (step 2)
// or `after`'s (step 3).
int64_t expect_resumes_whole(const std::string& dir, const TrainedGpt& before, const TrainedGpt& after) {
  TrainedGpt resumed;
  const int64_t step = load_checkpoint(dir, resumed.model, "gpt", resumed.optimizer).step;
  EXPECT_TRUE(step == 2 || step == 3) << step;
  const TrainedGpt& expected = step == 2 ? before : after;
  expect_same_weights(expected.model, resumed.model);
  expect_same_state(expected.optimizer, resumed.optimizer);
  return step;
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

// DIR holds the current checkpoint and nothing else.
void expect_one_checkpoint(const std::string& dir) {
  const std::string current = std::filesystem::path(io::current_checkpoint(dir)).filename().string();
  EXPECT_TRUE(current.starts_with("step-00000003")) << current;  // "step-00000003-2" when step 3 was already current
  EXPECT_EQ(entries(dir), (std::set<std::string>{"latest", "model.safetensors", "optimizer.safetensors", "trainer.json",
                                                 "tokenizer.model", current}));
}

// Two runs from the same seed: `before` at step 2, `after` one step further.
struct BeforeAndAfter {
  struct Seed {
    Seed() { manual_seed(7); }
  };
  BeforeAndAfter() { after.step(); }
  Seed seed_before;
  TrainedGpt before;
  Seed seed_after;
  TrainedGpt after;
};

void write_tokenizer(const std::string& dir) { std::ofstream(dir + "/tokenizer.model") << "the task's own file"; }

// trainer.json is read field by field: each corruption is a FormatError naming the file and the
// field, never an nlohmann exception (an internal error) or a resume at a nonsense step.
TEST(TrainCheckpoint, CorruptTrainerStateIsRefusedNamingTheField) {
  testing::TempDir dir;
  TrainedGpt run;
  TrainerState state = at_step(40);
  state.epoch = 3;
  state.options = {{"planned_steps", 100}};
  save_checkpoint(dir.path(), run.model, "gpt", run.optimizer, state);
  const std::string path = io::current_checkpoint(dir.path()) + "/trainer.json";
  const nlohmann::json good = nlohmann::json::parse(io::read_file(path));
  auto write = [&](const std::string& text) {
    io::write_file_atomic(path, [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
  };
  struct Case {
    const char* pointer;  // the field replaced, as a JSON pointer
    nlohmann::json value;
    const char* says;
  };
  const Case cases[] = {
      {"/step", "40", "\"step\" must be an integer in [0, "},
      {"/step", -1, "found -1"},
      {"/step", 1e30, "found 1e+30"},
      {"/step", 4.5, "found 4.5"},
      {"/step", nlohmann::json::parse("18446744073709551615"), "found 18446744073709551615"},
      {"/epoch", 41, "\"epoch\" must be an integer in [0, 40], found 41"},
      {"/epoch", nullptr, "found null"},
      {"/options/planned_steps", 39, "options: \"planned_steps\" must be an integer in [40, "},
      {"/options/planned_steps", "many", "found \"many\""},
      {"/options", nlohmann::json::array(), "\"options\" must be an object"},
      {"/rng", nlohmann::json::array({"1", "2", "3"}), "\"rng\" must be 4 decimal strings"},
      {"/rng/0", 12, "\"rng\" must be 4 decimal strings"},
      {"/rng/0", "18446744073709551616", "rng: expected a decimal integer"},
      {"/rng/0", "-1", "rng: expected a decimal integer"},
      {"/model", 5, "\"model\" must be a string, found 5"},
      {"/optimizer", nlohmann::json::object(), "\"optimizer\" must be a string"},
      {"/grad_scaler", {{"scale", -1.0}, {"growth_tracker", 0}, {"skipped_steps", 0}, {"overflows_at_minimum", 0}},
       "grad_scaler: \"scale\" must be a number in"},
      {"/grad_scaler", {{"scale", 1.0}, {"growth_tracker", 0}, {"skipped_steps", 41}, {"overflows_at_minimum", 0}},
       "grad_scaler: \"skipped_steps\" must be an integer in [0, 40]"},
      {"/grad_scaler", 7, "grad_scaler: expected a JSON object"},
  };
  TrainedGpt resumed;
  for (const Case& c : cases) {
    nlohmann::json bad = good;
    bad[nlohmann::json::json_pointer(c.pointer)] = c.value;
    write(bad.dump());
    std::string message = message_of<FormatError>([&] { load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer); });
    EXPECT_TRUE(contains(message, path) && contains(message, c.says)) << c.pointer << ": " << message;
  }
  for (const std::string& text : {std::string("[") + std::string(100000, '[') + std::string(100001, ']'),
                                  std::string("{\"step\": 1, \"step\": 2}"), std::string("{\"step\": 4")}) {
    write(text);
    std::string message = message_of<FormatError>([&] { load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer); });
    EXPECT_TRUE(contains(message, path)) << message;
  }
  write(good.dump());
  EXPECT_EQ(load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer).step, 40);
}

// The step the weights and optimizer state record is a decimal integer, checked as one.
TEST(TrainCheckpoint, NonNumericOrOverflowingStepMetadataIsRefusedNamingTheFile) {
  testing::TempDir dir;
  TrainedGpt run;
  save_checkpoint(dir.path(), run.model, "gpt", run.optimizer, at_step(2));
  const io::SafetensorsFile saved = io::load_safetensors(optimizer_file(dir));
  TrainedGpt resumed;
  for (const char* step : {"two", "", "-2", "2.0", "99999999999999999999", "9223372036854775808"}) {
    std::map<std::string, std::string> metadata = saved.metadata;
    metadata["weft.step"] = step;
    io::save_safetensors(optimizer_file(dir), saved.tensors, metadata);
    std::string message = message_of<FormatError>([&] { load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer); });
    EXPECT_TRUE(contains(message, "optimizer.safetensors: weft.step: expected a decimal integer")) << step << ": " << message;
  }
}

TEST(TrainCheckpoint, ASaveFailingAtAnyOperationLeavesTheLastOneResumable) {
  BeforeAndAfter runs;
  int64_t n = 1, kept_previous = 0;
  for (;; ++n) {
    testing::TempDir dir;
    save_checkpoint(dir.path(), runs.before.model, "gpt", runs.before.optimizer, at_step(2), {}, write_tokenizer);
    io::inject_fault_at(n);
    bool failed = false;
    try {
      save_checkpoint(dir.path(), runs.after.model, "gpt", runs.after.optimizer, at_step(3), {}, write_tokenizer);
    } catch (const IOError& e) {
      failed = true;
      EXPECT_TRUE(contains(e.what(), dir.path())) << "names the path: " << e.what();
      EXPECT_TRUE(contains(e.what(), "No space left on device")) << e.what();
    }
    const int64_t seen = io::fault_points_seen();
    io::inject_fault_at(0);
    if (!failed) {
      EXPECT_LT(seen, n) << "operation " << n << " was told to fail and the save passed";
      break;
    }
    SCOPED_TRACE("failed at operation " + std::to_string(n));
    kept_previous += expect_resumes_whole(dir.path(), runs.before, runs.after) == 2;

    save_checkpoint(dir.path(), runs.after.model, "gpt", runs.after.optimizer, at_step(3), {}, write_tokenizer);
    EXPECT_EQ(expect_resumes_whole(dir.path(), runs.before, runs.after), 3);
    expect_one_checkpoint(dir.path());  // the next save removes what the failed one left
  }
  EXPECT_GT(n, 20) << "a save's writes, fsyncs and renames are all counted";
  EXPECT_EQ(kept_previous, n - 2) << "only the directory's fsync follows the pointer's rename, the commit";
}

// The state a background save writes is the state at save(), however the training that goes on
// changes the model and the optimizer while the thread writes it.
TEST(TrainCheckpoint, ABackgroundSaveWritesTheStateOfItsStepWhileTrainingGoesOn) {
  testing::TempDir dir;
  BeforeAndAfter runs;
  manual_seed(7);
  TrainedGpt training;  // `before`'s state, stepped on while its checkpoint is written
  CheckpointSaver saver(/*background=*/true);
  // The step in the task's files runs after the copies are taken and before the thread starts,
  // every time; the one after save() returns runs beside the thread.
  saver.save(dir.path(), training.model, "gpt", optimizer_state_io(training.model, training.optimizer), at_step(2), {},
             [&](const std::string& staging) {
               write_tokenizer(staging);
               training.step();
             });
  training.step();
  saver.wait();
  EXPECT_EQ(expect_resumes_whole(dir.path(), runs.before, runs.after), 2);
}

// A background save failing at any operation: save() or the wait() after it throws the blocking
// save's IOError, the previous checkpoint stays current (the new one once the pointer moved), and
// the next save removes what the failed one left.
TEST(TrainCheckpoint, ABackgroundSaveFailingAtAnyOperationLeavesTheLastOneResumable) {
  BeforeAndAfter runs;
  const OptimizerStateIO after_state = optimizer_state_io(runs.after.model, runs.after.optimizer);
  int64_t n = 1, failed_in_background = 0;
  for (;; ++n) {
    testing::TempDir dir;
    save_checkpoint(dir.path(), runs.before.model, "gpt", runs.before.optimizer, at_step(2), {}, write_tokenizer);
    CheckpointSaver saver(/*background=*/true);
    const testing::FaultedSave f = testing::save_failing_at(
        n, [&] { saver.save(dir.path(), runs.after.model, "gpt", after_state, at_step(3), {}, write_tokenizer); },
        [&] { saver.wait(); });
    const std::string& message = f.message;
    if (message.empty()) {
      EXPECT_LT(f.seen, n) << "operation " << n << " was told to fail and the save passed";
      break;
    }
    SCOPED_TRACE("failed at operation " + std::to_string(n));
    failed_in_background += f.started;
    EXPECT_TRUE(contains(message, dir.path())) << "names the path: " << message;
    EXPECT_TRUE(contains(message, "No space left on device")) << message;
    expect_resumes_whole(dir.path(), runs.before, runs.after);

    saver.save(dir.path(), runs.after.model, "gpt", after_state, at_step(3), {}, write_tokenizer);
    saver.wait();
    EXPECT_EQ(expect_resumes_whole(dir.path(), runs.before, runs.after), 3);
    expect_one_checkpoint(dir.path());
  }
  EXPECT_GT(n, 20) << "a save's writes, fsyncs and renames are all counted";
  EXPECT_GT(failed_in_background, 10) << "the model's and optimizer's files, trainer.json and the commit";
}

// A filesystem of 1 MiB (tmpfs, when this process may mount one) filled until the next save fits
// only halfway.
TEST(TrainCheckpoint, AFullDiskLeavesTheLastCheckpointResumable) {
  testing::TempDir dir;
  if (std::system(("mount -t tmpfs -o size=1m weft-test " + dir.path() + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  struct Unmount {
    std::string path;
    ~Unmount() { (void)std::system(("umount " + path).c_str()); }
  } unmount{dir.path()};
  const std::string checkpoint = dir.file("run");
  BeforeAndAfter runs;
  save_checkpoint(checkpoint, runs.before.model, "gpt", runs.before.optimizer, at_step(2), {}, write_tokenizer);
  const auto space = std::filesystem::space(dir.path());
  uintmax_t size = 0;
  for (const auto& entry : std::filesystem::directory_iterator(io::current_checkpoint(checkpoint)))
    size += entry.file_size();
  ASSERT_GT(space.available, size) << "the filesystem must hold more than one checkpoint for this test";
  {
    std::ofstream filler(dir.file("filler"), std::ios::binary);
    filler << std::string(space.available - size / 2, 'x');
  }

  std::string message = testing::message_of<IOError>([&] {
    save_checkpoint(checkpoint, runs.after.model, "gpt", runs.after.optimizer, at_step(3), {}, write_tokenizer);
  });
  EXPECT_TRUE(contains(message, checkpoint)) << message;
  EXPECT_TRUE(contains(message, "No space left on device")) << message;
  EXPECT_EQ(expect_resumes_whole(checkpoint, runs.before, runs.after), 2);

  std::filesystem::remove(dir.file("filler"));
  save_checkpoint(checkpoint, runs.after.model, "gpt", runs.after.optimizer, at_step(3), {}, write_tokenizer);
  EXPECT_EQ(expect_resumes_whole(checkpoint, runs.before, runs.after), 3);
  expect_one_checkpoint(checkpoint);
}

TEST(TrainCheckpoint, OptimizerOverForeignTensorsCannotBeSaved) {
  testing::TempDir dir;
  TrainedGpt run;
  Tensor stranger = Tensor::zeros({3}).requires_grad_(true);
  optim::AdamW foreign({stranger});
  std::string message = message_of<ValueError>([&] { save_checkpoint(dir.path(), run.model, "gpt", foreign, {}); });
  EXPECT_TRUE(contains(message, "not one of the model's parameters")) << message;
}

}  // namespace
}  // namespace weft::train
