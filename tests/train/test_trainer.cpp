#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "expect_error.h"
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
    if (!fs::exists(ClassifierOptions{}.data_dir)) GTEST_SKIP() << "Fashion-MNIST is not installed (scripts/setup)";
    dir_ = fs::temp_directory_path() / ("weft_trainer_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A short MLP run: a few batches per epoch keep the test fast and still cross epochs.
  ClassifierOptions small(const std::string& out) const {
    ClassifierOptions o;
    o.model = "mlp";
    o.epochs = 2;
    o.threads = 2;
    o.limit_train_batches = 12;
    o.log_every = 5;
    o.out_dir = (dir_ / out).string();
    return o;
  }
  TrainResult run(const ClassifierOptions& o) {
    std::ostringstream log;
    return train_classifier(o, log, false);
  }
  std::string bytes_of(const std::string& out, const std::string& file) const {
    std::ifstream in(dir_ / out / file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path dir_;
};

TEST_F(TrainerTest, SameSeedAndThreadsGiveBitIdenticalParameters) {
  run(small("a"));
  ClassifierOptions b = small("b");
  b.prefetch = 0;  // batches built on the training thread instead: must not change anything
  run(b);
  EXPECT_EQ(bytes_of("a", "model.safetensors"), bytes_of("b", "model.safetensors"));
  EXPECT_EQ(bytes_of("a", "optimizer.safetensors"), bytes_of("b", "optimizer.safetensors"));
  ClassifierOptions c = small("c");
  c.seed = 1;
  run(c);
  EXPECT_NE(bytes_of("a", "model.safetensors"), bytes_of("c", "model.safetensors"));
}

// With a schedule that depends only on the step (cosine's horizon is --epochs itself).
TEST_F(TrainerTest, ResumingAfterOneEpochEqualsTrainingTwo) {
  ClassifierOptions straight = small("straight");
  straight.schedule = "step";
  run(straight);
  ClassifierOptions first = small("first");
  first.schedule = "step";
  first.epochs = 1;
  run(first);
  ClassifierOptions resumed = small("resumed");
  resumed.schedule = "step";
  resumed.resume_dir = first.out_dir;
  TrainResult r = run(resumed);
  EXPECT_EQ(r.steps, 24);

  io::SafetensorsFile a = io::load_safetensors(straight.out_dir + "/model.safetensors");
  io::SafetensorsFile b = io::load_safetensors(resumed.out_dir + "/model.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    auto x = a.tensors[i].second.to_vector<double>(), y = b.tensors[i].second.to_vector<double>();
    ASSERT_EQ(x.size(), y.size());
    for (size_t j = 0; j < x.size(); ++j) ASSERT_NEAR(x[j], y[j], 1e-6) << a.tensors[i].first << "[" << j << "]";
  }
}

TEST_F(TrainerTest, ExtendingACosineRunSaysTheScheduleIsReplanned) {
  ClassifierOptions first = small("cosine");
  first.epochs = 1;
  run(first);
  ClassifierOptions longer = small("cosine_longer");
  longer.resume_dir = first.out_dir;
  std::ostringstream log;
  train_classifier(longer, log, false);
  EXPECT_TRUE(contains(log.str(), "planned for 1 epochs and now runs 2")) << log.str();
}

TEST_F(TrainerTest, WritesTensorBoardEventsAndMetricsLines) {
  ClassifierOptions o = small("logs");
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
  ClassifierOptions o = small("ckpt");
  o.epochs = 1;
  run(o);
  std::string trainer_json = bytes_of("ckpt", "trainer.json");
  auto at = trainer_json.find("\"step\": 12");
  ASSERT_NE(at, std::string::npos);
  trainer_json.replace(at, 10, "\"step\": 13");
  std::ofstream(fs::path(o.out_dir) / "trainer.json") << trainer_json;
  auto model = nn::make_mlp();
  optim::AdamW optimizer(model->parameters());
  EXPECT_TRUE(contains(message_of<FormatError>([&] { load_checkpoint(o.out_dir, *model, "mlp", optimizer); }),
                       "inconsistent"));
}

TEST_F(TrainerTest, RefusesToResumeAnotherModel) {
  ClassifierOptions o = small("mlp_ckpt");
  o.epochs = 1;
  run(o);
  ClassifierOptions cnn = small("cnn");
  cnn.model = "cnn";
  cnn.resume_dir = o.out_dir;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(cnn); }), "holds a mlp model"));
}

TEST_F(TrainerTest, RejectsBadOptions) {
  ClassifierOptions o = small("bad");
  o.batch_size = 0;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--batch-size"));
  o = small("bad");
  o.optimizer = "lion";
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "unknown optimizer 'lion'"));
}

}  // namespace
}  // namespace weft::train
