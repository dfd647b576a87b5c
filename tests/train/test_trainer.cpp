#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <utility>
#include <vector>
#include <fstream>
#include <sstream>

#include "expect_error.h"
#include "weft/core/allocator.h"
#include "weft/infer/metadata.h"
#include "weft/io/safetensors.h"
#include "weft/nn/models.h"
#include "weft/optim/adam.h"
#include "weft/train/checkpoint.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::message_of;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(infer::image_dataset_info("fashion-mnist").default_dir)) GTEST_SKIP() << "Fashion-MNIST is not installed (scripts/setup)";
    dir_ = fs::temp_directory_path() / ("weft_trainer_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A short MLP run: a few batches per epoch keep the test fast and still cross epochs.
  TrainOptions small(const std::string& out) const {
    TrainOptions o;
    o.model = nn::ModelKind::mlp;
    o.epochs = 2;
    o.threads = 2;
    o.limit_train_batches = 12;
    o.log_every = 5;
    o.out_dir = (dir_ / out).string();
    return o;
  }
  TrainResult run(const TrainOptions& o) {
    std::ostringstream log;
    return train(o, log, false);
  }
  std::string bytes_of(const std::string& out, const std::string& file) const {
    std::ifstream in(dir_ / out / file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path dir_;
};

// The parameters two finished runs saved, compared within `tolerance`.
void expect_same_weights(const std::string& a_dir, const std::string& b_dir, double tolerance) {
  io::SafetensorsFile a = io::load_safetensors(a_dir + "/model.safetensors");
  io::SafetensorsFile b = io::load_safetensors(b_dir + "/model.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    auto x = a.tensors[i].second.to_vector<double>(), y = b.tensors[i].second.to_vector<double>();
    ASSERT_EQ(x.size(), y.size());
    for (size_t j = 0; j < x.size(); ++j) ASSERT_NEAR(x[j], y[j], tolerance) << a.tensors[i].first << "[" << j << "]";
  }
}

TEST_F(TrainerTest, SameSeedAndThreadsGiveBitIdenticalParameters) {
  run(small("a"));
  TrainOptions b = small("b");
  b.prefetch = 0;  // batches built on the training thread instead: must not change anything
  run(b);
  EXPECT_EQ(bytes_of("a", "model.safetensors"), bytes_of("b", "model.safetensors"));
  EXPECT_EQ(bytes_of("a", "optimizer.safetensors"), bytes_of("b", "optimizer.safetensors"));
  TrainOptions c = small("c");
  c.seed = 1;
  run(c);
  EXPECT_NE(bytes_of("a", "model.safetensors"), bytes_of("c", "model.safetensors"));
}

// --async-save writes what a blocking save writes, each epoch's checkpoint while the next epoch runs.
TEST_F(TrainerTest, SavingInTheBackgroundWritesTheBytesOfABlockingSave) {
  run(small("blocking"));
  TrainOptions background = small("background");
  background.async_save = true;
  run(background);
  EXPECT_EQ(bytes_of("blocking", "model.safetensors"), bytes_of("background", "model.safetensors"));
  EXPECT_EQ(bytes_of("blocking", "optimizer.safetensors"), bytes_of("background", "optimizer.safetensors"));
}

// With a schedule that depends only on the step (cosine's horizon is --epochs itself).
TEST_F(TrainerTest, ResumingAfterOneEpochEqualsTrainingTwo) {
  TrainOptions straight = small("straight");
  straight.schedule = "step";
  run(straight);
  TrainOptions first = small("first");
  first.schedule = "step";
  first.epochs = 1;
  run(first);
  TrainOptions resumed = small("resumed");
  resumed.schedule = "step";
  resumed.resume_dir = first.out_dir;
  TrainResult r = run(resumed);
  EXPECT_EQ(r.steps, 24);

  expect_same_weights(straight.out_dir, resumed.out_dir, 1e-6);
}

// A checkpoint between epochs: the loader starts at the step's batch of the epoch.
TEST_F(TrainerTest, ResumingMidEpochEqualsAnUninterruptedRun) {
  TrainOptions straight = small("straight");
  straight.schedule = "constant";  // cosine's horizon is the run's length
  straight.epochs = 1;
  run(straight);
  TrainOptions first = straight;
  first.out_dir = (dir_ / "first").string();
  first.epochs.reset();
  first.steps = 5;
  run(first);
  TrainOptions resumed = straight;
  resumed.out_dir = (dir_ / "resumed").string();
  resumed.resume_dir = first.out_dir;
  TrainResult r = run(resumed);
  EXPECT_EQ(r.steps, 12);
  EXPECT_EQ(r.items, 7 * 128) << "this run's samples";
  EXPECT_TRUE(bytes_of("straight", "model.safetensors") == bytes_of("resumed", "model.safetensors"));
}

// Clipping is the trainer's, so the classifiers have it too: a norm bound far above the
// gradients' changes nothing, a tiny one changes every update.
TEST_F(TrainerTest, ClippingAppliesToTheClassifiers) {
  TrainOptions plain = small("plain");
  plain.epochs = 1;
  plain.limit_train_batches = 3;
  run(plain);
  TrainOptions loose = plain;
  loose.out_dir = (dir_ / "loose").string();
  loose.clip_grad = 1e9;
  run(loose);
  TrainOptions tight = plain;
  tight.out_dir = (dir_ / "tight").string();
  tight.clip_grad = 1e-6;
  TrainResult r = run(tight);
  EXPECT_EQ(r.setup["clip_grad"], 1e-6);
  EXPECT_EQ(bytes_of("plain", "model.safetensors"), bytes_of("loose", "model.safetensors"));
  EXPECT_NE(bytes_of("plain", "model.safetensors"), bytes_of("tight", "model.safetensors"));
}

// --profile records the named steps: phases, module scopes from the model's forward hooks, ops;
// the profiler's step scopes take the time the trainer's own clock measures over those steps.
TEST_F(TrainerTest, ProfilesTheNamedStepsIntoATrace) {
  TrainOptions o = small("profiled");
  o.epochs = 1;
  o.limit_train_batches = 4;
  o.profile_trace = (dir_ / "trace.json").string();
  o.profile_first_step = 2;
  o.profile_last_step = 3;
  std::ostringstream log;
  TrainResult r = train(o, log, false);
  EXPECT_TRUE(contains(log.str(), "profile of steps 2-3")) << log.str();
  EXPECT_TRUE(contains(log.str(), "linear_backward")) << log.str();

  std::ifstream in(o.profile_trace);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::map<std::string, int> phases;
  std::set<std::string> modules;
  double step_us = 0;
  std::vector<std::pair<double, double>> steps, inner;  // [start, end] in µs
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    if (e.at("cat") == "module") modules.insert(e.at("name").get<std::string>());
    if (e.at("cat") != "phase") continue;
    const std::string name = e.at("name");
    ++phases[name];
    const double start = e.at("ts").get<double>(), end = start + e.at("dur").get<double>();
    (name == "step" ? steps : inner).emplace_back(start, end);
    if (name == "step") step_us += end - start;
  }
  EXPECT_EQ(phases["step"], 2);
  EXPECT_EQ(phases["forward"], 2);
  EXPECT_EQ(phases["backward"], 2);
  EXPECT_EQ(phases["optimizer"], 2);
  EXPECT_TRUE(modules.contains("mlp") && modules.contains("1") && modules.contains("5")) << trace.dump().substr(0, 500);
  // Forward, backward and update each lie within one of the profiled steps (to a nanosecond: the
  // ends are sums of doubles).
  for (const auto& [start, end] : inner)
    EXPECT_TRUE(std::any_of(steps.begin(), steps.end(), [&](const auto& step) {
      return start >= step.first - 1e-3 && end <= step.second + 1e-3;
    })) << "a phase at " << start << "-" << end << " us lies outside the profiled steps";
  // The trainer's clock brackets the step scope, which holds the phases; how far apart they are is
  // the machine's business (a loaded CI machine preempts anywhere), so only the nesting is checked.
  double inner_us = 0;
  for (const auto& [start, end] : inner) inner_us += end - start;
  EXPECT_LE(r.profile.at("step_ms").get<double>(), r.profile.at("measured_step_ms").get<double>() + 1e-6);
  EXPECT_LE(inner_us, step_us + 1e-3);
  EXPECT_NEAR(r.profile.at("step_ms").get<double>(), step_us / 1e3, 1e-3 * step_us);
  bool saw_linear = false;
  for (const nlohmann::json& op : r.profile.at("ops")) saw_linear |= op.at("name") == "linear" && op.at("calls") == 6;
  EXPECT_TRUE(saw_linear) << r.profile.at("ops").dump();
}

// Steps the run will not reach are refused, before anything is written; the default range is
// cut to the run instead, since the user did not ask for it.
TEST_F(TrainerTest, ProfileStepsBeyondTheRunAreRefused) {
  TrainOptions o = small("profile-beyond");
  o.steps = 3;
  o.profile_trace = (dir_ / "trace.json").string();
  o.profile_first_step = 2;
  o.profile_last_step = 5;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--profile-steps: must end by the run's last step, 3"));
  EXPECT_FALSE(std::filesystem::exists(o.out_dir));
  o.profile_first_step.reset();
  o.profile_last_step.reset();
  EXPECT_EQ(run(o).profile.at("last_step"), 3);
}

// A loss that is no longer a number stops the run at that step, saving nothing over the last
// checkpoint: plain SGD at a learning rate of 1e12 overflows the MLP's weights in a step or two.
TEST_F(TrainerTest, ANonFiniteLossStopsTheRun) {
  TrainOptions o = small("diverged");
  o.optimizer = optim::OptimizerKind::sgd;
  o.lr = 1e12;
  o.eval_every = 1;
  const std::string message = message_of<DivergedError>([&] { run(o); });
  EXPECT_TRUE(contains(message, "not a finite number: training diverged")) << message;
  EXPECT_TRUE(contains(message, "Try a lower --lr (this run: 1e+12)")) << message;
  EXPECT_TRUE(contains(message, "The last checkpoint, of step ")) << message;
  // The checkpoint it names is the last good one: it resumes, and its loss was finite.
  std::ifstream metrics(fs::path(o.out_dir) / "metrics.jsonl");
  std::string last;
  for (std::string line; std::getline(metrics, line);) last = line;
  EXPECT_TRUE(contains(last, "test/loss")) << last;
  EXPECT_FALSE(contains(last, "NaN") || contains(last, "null")) << last;
}

// Whole epochs are no longer special: 1.5 epochs of 12 batches are 18 steps.
TEST_F(TrainerTest, FractionalEpochsAreSteps) {
  TrainOptions o = small("half");
  o.epochs = 1.5;
  TrainResult r = run(o);
  EXPECT_EQ(r.steps, 18);
  EXPECT_EQ(r.planned_steps, 18);
}

TEST_F(TrainerTest, ExtendingACosineRunSaysTheScheduleIsReplanned) {
  TrainOptions first = small("cosine");
  first.epochs = 1;
  run(first);
  TrainOptions longer = small("cosine_longer");
  longer.resume_dir = first.out_dir;
  std::ostringstream log;
  train(longer, log, false);
  EXPECT_TRUE(contains(log.str(), "planned for 12 steps and now runs 24")) << log.str();
}

// K micro-batches of B/K sum the same per-sample gradients as one batch of B, in another order,
// so they differ by f32 rounding (~1e-7 relative). One SGD update is linear in the gradient and
// keeps that difference at lr x rounding; Adam divides by sqrt(v) and can magnify it for
// parameters whose gradient is near zero, and later steps compound it through the forward
// (measured over 12 steps: 1.2e-5 with AdamW, 1.1e-6 with SGD), so the test compares one update.
TEST_F(TrainerTest, GradientAccumulationGivesTheUpdateOfTheWholeBatch) {
  TrainOptions whole = small("whole");
  whole.model = nn::ModelKind::cnn;
  whole.optimizer = optim::OptimizerKind::sgd;
  whole.epochs = 1;
  whole.limit_train_batches = 1;
  run(whole);
  TrainOptions accumulated = whole;
  accumulated.out_dir = (dir_ / "accumulated").string();
  accumulated.grad_accum = 4;
  TrainResult r = run(accumulated);
  EXPECT_EQ(r.micro_batch, 32);
  expect_same_weights(whole.out_dir, accumulated.out_dir, 1e-7);  // a few f32 ulps of weights below 1
}

TEST_F(TrainerTest, GradAccumMustDivideTheBatch) {
  TrainOptions o = small("bad_accum");
  o.grad_accum = 3;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--grad-accum: must divide --batch-size"));
}

// Under a memory limit that a batch of 128 CNN activations does not fit (next to the 55 MB of
// Fashion-MNIST the process holds), the first step runs out of memory; --auto-batch redoes it
// in halves, so the run equals one trained with that accumulation from the start.
TEST_F(TrainerTest, AutoBatchRedoesAStepThatRanOutOfMemory) {
  TrainOptions limited = small("limited");
  limited.model = nn::ModelKind::cnn;
  limited.epochs = 1;
  limited.limit_train_batches = 3;
  limited.memory_limit = parse_bytes("80MiB");
  EXPECT_TRUE(contains(message_of<OutOfMemoryError>([&] { run(limited); }), "out of memory"));

  limited.auto_batch = true;
  limited.overwrite = true;  // the failed run left its logs there
  std::ostringstream log;
  TrainResult r = train(limited, log, false);
  CachingAllocator::cpu().set_memory_limit(0);
  ASSERT_LT(r.micro_batch, 128);
  EXPECT_TRUE(contains(log.str(), "auto-batch: step 1 ran out of memory")) << log.str();
  EXPECT_EQ(r.steps, 3);

  TrainOptions planned = small("planned");
  planned.model = nn::ModelKind::cnn;
  planned.epochs = 1;
  planned.limit_train_batches = 3;
  planned.grad_accum = 128 / r.micro_batch;
  run(planned);
  expect_same_weights(limited.out_dir, planned.out_dir, 0);
}

// fp16's loss scale is part of the run: the checkpoint keeps it and a resumed run starts from it.
TEST_F(TrainerTest, Fp16CheckpointsKeepTheLossScaler) {
  TrainOptions o = small("fp16");
  o.epochs = 1;
  o.precision = amp::Precision::fp16;
  TrainResult r = run(o);
  auto model = nn::make_mlp();
  optim::AdamW optimizer(model->parameters());
  TrainerState state = load_checkpoint(o.out_dir, *model, "mlp", optimizer);
  ASSERT_TRUE(state.grad_scaler.has_value());
  EXPECT_EQ(state.grad_scaler->scale, r.loss_scale);
  EXPECT_EQ(state.grad_scaler->skipped_steps, r.skipped_steps);
  EXPECT_EQ(state.grad_scaler->growth_tracker, 12 - r.skipped_steps);  // clean steps since the last change
  EXPECT_TRUE(contains(bytes_of("fp16", "metrics.jsonl"), "\"amp/loss_scale\""));
}

// The model itself in bf16: its evaluation takes the f32 images through autocast (it failed at the
// first evaluation, "x is f32 but weight is bf16", and saved nothing), and the checkpoint is bf16.
TEST_F(TrainerTest, MasterWeightsClassifiersEvaluateAndSaveInBf16) {
  for (const char* model : {"mlp", "cnn"}) {
    TrainOptions o = small(std::string("master-") + model);
    o.model = nn::parse_model_kind(model);
    o.epochs = 1;
    o.limit_train_batches = 4;
    o.precision = amp::Precision::bf16;
    o.master_weights = true;
    TrainResult r = run(o);
    EXPECT_GT(r.evaluation["test_accuracy"].get<double>(), 0.15) << model;  // chance is 0.1
    io::SafetensorsFile saved = io::load_safetensors(o.out_dir + "/model.safetensors");
    EXPECT_EQ(saved.tensors.front().second.dtype(), DType::bf16) << model;
  }
}

TEST_F(TrainerTest, WritesTensorBoardEventsAndMetricsLines) {
  TrainOptions o = small("logs");
  o.epochs = 1;
  run(o);
  int lines = 0, with_loss = 0;
  std::ifstream in(fs::path(o.out_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line); ++lines) with_loss += contains(line, "\"train/loss\"");
  EXPECT_EQ(with_loss, 3);  // steps 5, 10 and the epoch's last (12)
  EXPECT_EQ(lines, 4);      // and the test-set record at the epoch's end
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(o.out_dir))
    event_files += entry.path().filename().string().starts_with("events.out.tfevents.");
  EXPECT_EQ(event_files, 1);
}

TEST_F(TrainerTest, RefusesACheckpointWhoseFilesDisagree) {
  TrainOptions o = small("ckpt");
  o.epochs = 1;
  run(o);
  std::string trainer_json = bytes_of("ckpt", "trainer.json");
  auto at = trainer_json.find("\"step\": 12");
  ASSERT_NE(at, std::string::npos);
  trainer_json.replace(at, 10, "\"step\": 11");  // within the run's 12 planned steps
  std::ofstream(fs::path(o.out_dir) / "trainer.json") << trainer_json;
  auto model = nn::make_mlp();
  optim::AdamW optimizer(model->parameters());
  EXPECT_TRUE(contains(message_of<FormatError>([&] { load_checkpoint(o.out_dir, *model, "mlp", optimizer); }),
                       "inconsistent"));
}

TEST_F(TrainerTest, RefusesToResumeAnotherModel) {
  TrainOptions o = small("mlp_ckpt");
  o.epochs = 1;
  run(o);
  TrainOptions cnn = small("cnn");
  cnn.model = nn::ModelKind::cnn;
  cnn.resume_dir = o.out_dir;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(cnn); }), "holds a mlp model"));
}

TEST_F(TrainerTest, RejectsBadOptions) {
  TrainOptions o = small("bad");
  o.batch_size = 0;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--batch-size"));
  o = small("bad");
  o.epochs = std::nan("");
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--epochs: must be a number in (0, 1e+12], got 'nan'"));
  // Bounds that keep the trainer's arithmetic in int64, stated in the message.
  o = small("bad");
  o.steps = kMaxSteps + 1;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }),
                       "--steps: must be a whole number from 1 to 1000000000000, got '1000000000001'"));
  o = small("bad");
  o.epochs = 1e11;  // 12 batches an epoch: more steps than a run takes
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }),
                       "--epochs: must be at most 83333333333.33333 at 12 steps per epoch (a run is at most "
                       "1000000000000 steps), got '1e+11'"));
  o = small("bad");
  o.warmup = 10;
  o.schedule = "constant";
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--warmup: is not a flag of --schedule constant"));
  o = small("bad");
  o.precision = amp::Precision::bf16_pure;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "bf16-pure is priced by weft plan but not trained"));
}

// A background save writes into --out, whatever the parallel layout (sharded checkpoints too).
TEST(TrainOptionsTest, AsyncSaveNeedsAnOutDirectory) {
  TrainOptions o;
  o.model = nn::ModelKind::gpt;
  o.async_save = true;
  EXPECT_EQ(message_of<ValueError>([&] { o.validate(); }),
            "--async-save: saves checkpoints into --out, and no --out is given");
  o.out_dir = "run";
  o.validate();
  o.parallel = "zero2";
  o.validate();
}

// Every option a run records is decided for a launch of several ranks: agreed across them
// (TrainOptions::agreed_across_ranks), or one that only a rank's own machine sees. A field added
// to the record and to neither list fails here.
TEST(TrainOptionsTest, EveryRecordedOptionIsAgreedAcrossRanksOrTheMachines) {
  const std::set<std::string> machines = {"--memory-limit", "--threads", "--profile"};
  for (const char* model : {"mlp", "gpt"}) {
    TrainOptions o;
    o.model = nn::parse_model_kind(model);
    std::set<std::string> agreed;
    for (const nlohmann::json& pair : o.agreed_across_ranks()) agreed.insert(pair[0].get<std::string>());
    const nlohmann::json recorded = o.to_json();
    for (const auto& [key, value] : recorded.items()) {
      std::string flag = "--" + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      if (flag == "--profile-trace") flag = "--profile";
      EXPECT_TRUE(agreed.contains(flag) || machines.contains(flag)) << model << ": " << key << " is neither";
    }
  }
}

}  // namespace
}  // namespace weft::train
