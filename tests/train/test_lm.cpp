// The GPT task of the trainer (train/language_task.cpp): it learns, resumes bit-identically, and its checkpoints,
// tokenizers and options are checked.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft/data/tokenizer.h"
#include "weft/infer/load.h"
#include "weft/io/safetensors.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

using testing::contains;
using testing::message_of;

class LMTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 300 short documents of a few repeated words: a tiny model learns their spelling quickly.
    std::ofstream out(corpus());
    const char* words[] = {"the cat sat", "on the mat", "a dog ran", "to the park", "and back"};
    for (int i = 0; i < 300; ++i) out << words[i % 5] << " " << words[(i * 3 + 1) % 5] << ".\n%\n";
  }
  std::string corpus() const { return dir_.file("corpus.txt"); }

  TrainOptions small(const std::string& out = "") const {
    TrainOptions o;
    o.model = nn::ModelKind::gpt;
    o.text.layers = 2;
    o.text.heads = 2;
    o.text.dim = 32;
    o.text.context = 16;
    o.text.data = {corpus()};
    o.text.val_fraction = 0.1;
    o.batch_size = 8;
    o.steps = 30;
    o.lr = 1e-2;
    o.threads = 2;
    o.log_every = 10;
    if (!out.empty()) o.out_dir = dir_.file(out);
    return o;
  }
  TrainResult run(const TrainOptions& o) {
    std::ostringstream log;
    TrainResult r = train(o, log, false);
    log_ = log.str();
    return r;
  }

  testing::TempDir dir_;
  std::string log_;
};

double value(const TrainResult& r, const char* key) { return r.evaluation.at(key).get<double>(); }

std::vector<float> weights_of(const std::string& dir) {
  std::vector<float> all;
  for (const auto& [name, t] : io::load_safetensors(dir + "/model.safetensors").tensors)
    for (float x : t.to_vector<float>()) all.push_back(x);
  return all;
}

TEST_F(LMTest, LearnsAndReportsBitsPerByte) {
  TrainResult r = run(small());
  EXPECT_EQ(r.steps, 30);
  EXPECT_EQ(r.items, 30 * 8 * 16);
  EXPECT_EQ(r.task["vocab"], 256) << "the byte tokenizer's";
  EXPECT_GT(r.params, 0);
  // Byte tokens: bits per byte is the loss in bits.
  EXPECT_NEAR(value(r, "val_bits_per_byte"), value(r, "val_loss") / std::log(2.0), 1e-9);
  EXPECT_LT(value(r, "val_bits_per_byte"), value(r, "unigram_bits_per_byte")) << "context helps: " << log_;
  EXPECT_LT(value(r, "val_loss"), 0.7 * std::log(256.0)) << log_;
  EXPECT_GT(r.items_per_s, 0);
  EXPECT_GT(r.peak_allocated_bytes, 0);
  EXPECT_TRUE(contains(log_, "unigram baseline")) << log_;
}

TEST_F(LMTest, ResumedRunEqualsAnUninterruptedOne) {
  TrainOptions whole = small("whole");
  whole.schedule = "constant";  // cosine's horizon is the run's length; constant depends on the step alone
  whole.steps = 12;
  run(whole);
  TrainOptions first = whole;
  first.out_dir = dir_.file("split");
  first.steps = 5;
  run(first);
  TrainOptions rest = first;
  rest.resume_dir = rest.out_dir;
  rest.steps = 12;
  for (auto* size : {&rest.text.layers, &rest.text.heads, &rest.text.dim, &rest.text.context})
    size->reset();  // the architecture from the checkpoint
  TrainResult r = run(rest);
  EXPECT_TRUE(contains(log_, "resumed from")) << log_;
  EXPECT_EQ(r.steps, 12);
  EXPECT_EQ(r.items, 7 * 8 * 16) << "this run's tokens";
  EXPECT_EQ(weights_of(whole.out_dir), weights_of(rest.out_dir));
}

// Plain SGD's update is linear in the gradient, so the summation-order difference between one
// batch and four micro-batches stays at f32 rounding times lr. (Adam divides by the gradient's
// running RMS and magnifies that difference for gradients near zero to a visible fraction of lr:
// up to 1.02e-5 was seen on a weight with AdamW, which would hide a real error of that size.)
TEST_F(LMTest, GradientAccumulationAndCheckpointingKeepTheUpdate) {
  TrainOptions plain = small("plain");
  plain.optimizer = optim::OptimizerKind::sgd;
  plain.lr = 0.1;
  plain.steps = 4;
  const double loss = value(run(plain), "val_loss");
  TrainOptions accumulated = plain;
  accumulated.out_dir = dir_.file("accumulated");
  accumulated.grad_accum = 4;
  accumulated.checkpoint_activations = true;
  TrainResult r = run(accumulated);
  EXPECT_EQ(r.micro_batch, 2);
  EXPECT_NEAR(value(r, "val_loss"), loss, 1e-5);
  std::vector<float> a = weights_of(plain.out_dir), b = weights_of(accumulated.out_dir);
  ASSERT_EQ(a.size(), b.size());
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(double(a[i]) - double(b[i])));
  EXPECT_LT(largest, 1e-7);
}

// Momentum SGD and the step schedule are the trainer's, so the GPT has them too.
TEST_F(LMTest, SgdWithAStepScheduleTrainsTheGpt) {
  TrainOptions o = small("sgd");
  o.optimizer = optim::OptimizerKind::momentum;
  o.schedule = "step";
  o.lr = 0.5;
  TrainResult r = run(o);
  EXPECT_EQ(r.setup["optimizer"], "momentum");
  EXPECT_LT(value(r, "val_loss"), std::log(256.0)) << log_;
  EXPECT_TRUE(io::load_safetensors(o.out_dir + "/optimizer.safetensors").tensors.size() > 0);
}

TEST_F(LMTest, Bf16TrainsCloseToFp32) {
  TrainOptions fp32 = small();
  TrainResult full = run(fp32);
  TrainOptions bf16 = small();
  bf16.precision = amp::Precision::bf16;
  TrainResult low = run(bf16);
  EXPECT_NEAR(value(low, "val_loss"), value(full, "val_loss"), 0.1 * value(full, "val_loss"));
}

TEST_F(LMTest, RandomDataNeedsNoTextAndHasNoBitsPerByte) {
  TrainOptions o = small();
  o.text.data = {"random"};
  o.text.vocab = 1000;
  o.steps = 3;
  o.text.eval_windows = 4;
  TrainResult r = run(o);
  EXPECT_EQ(r.task["vocab"], 1000);
  EXPECT_TRUE(std::isnan(value(r, "val_bits_per_byte")));
  EXPECT_NEAR(value(r, "val_loss"), std::log(1000.0), 0.2) << "uniform random tokens cannot be predicted";
}

TEST_F(LMTest, TimeLimitPlansTheStepsAndStops) {
  TrainOptions o = small();
  o.steps.reset();
  o.time_limit = 2;
  TrainResult r = run(o);
  EXPECT_TRUE(contains(log_, "time limit 2 s: about")) << log_;
  EXPECT_GT(r.steps, 0);
  EXPECT_LT(r.wall_s, 2 + 10) << "the limit covers training; setup and the last evaluation come on top";
}

TEST_F(LMTest, CheckpointRebuildsTheModelForInference) {
  TrainOptions o = small("saved");
  o.steps = 2;
  run(o);
  infer::LoadedModel loaded = infer::load_model(o.out_dir);
  EXPECT_EQ(loaded.gpt->config.layers, 2);
  EXPECT_EQ(loaded.gpt->config.context, 16);
  EXPECT_EQ(loaded.tokenizer->identity(), "byte");
  EXPECT_FALSE(loaded.model->is_training());
}

TEST_F(LMTest, RejectsATokenizerThatIsNotTheCheckpoints) {
  TrainOptions o = small("bytes");
  o.steps = 2;
  run(o);
  std::vector<std::string> documents;
  for (int i = 0; i < 200; ++i) documents.push_back("some words and more words " + std::to_string(i) + "\n");
  data::SentencePieceTokenizer other = data::train_sentencepiece(documents, {.model_type = "bpe", .vocab_size = 300});
  const std::string path = dir_.file("other.model");
  std::ofstream(path, std::ios::binary) << other.serialized_model();
  std::string message = message_of<ValueError>([&] { infer::load_model(o.out_dir, {.tokenizer = path}); });
  EXPECT_TRUE(contains(message, "does not match the checkpoint")) << message;
  EXPECT_TRUE(contains(message, "trained with byte (leave --tokenizer out to use the checkpoint's)")) << message;

  TrainOptions resumed = small();
  resumed.resume_dir = o.out_dir;
  resumed.text.tokenizer = path;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(resumed); }), "does not match the checkpoint"));
}

TEST_F(LMTest, SentencePieceTokenizerTravelsWithTheCheckpoint) {
  std::vector<std::string> documents;
  for (int i = 0; i < 200; ++i) documents.push_back("the cat sat on the mat " + std::to_string(i) + "\n");
  data::SentencePieceTokenizer tokenizer = data::train_sentencepiece(documents, {.model_type = "bpe", .vocab_size = 300});
  const std::string path = dir_.file("tok.model");
  std::ofstream(path, std::ios::binary) << tokenizer.serialized_model();
  TrainOptions o = small("pieces");
  o.text.tokenizer = path;
  o.steps = 2;
  TrainResult r = run(o);
  EXPECT_EQ(r.task["vocab"], 300);
  EXPECT_EQ(r.task["tokenizer"], tokenizer.identity());
  std::filesystem::remove(path);
  infer::LoadedModel loaded = infer::load_model(o.out_dir);
  EXPECT_EQ(loaded.tokenizer->identity(), tokenizer.identity()) << "read from the checkpoint's tokenizer.model";
}

TEST_F(LMTest, RejectsBadOptionsAndData) {
  TrainOptions o = small();
  o.text.vocab = 100;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--vocab: must be at least the tokenizer's vocabulary of 256, got '100'"));
  o = small();
  o.grad_accum = 3;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--grad-accum: must divide --batch-size"));
  o = small();
  o.text.heads = 3;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "must be a multiple of --heads (3)"));
  o = small();
  std::ofstream(dir_.file("empty.txt")).flush();
  o.text.data = {dir_.file("empty.txt")};
  EXPECT_TRUE(contains(message_of<FormatError>([&] { run(o); }), "empty.txt"));
  o = small();
  std::ofstream(dir_.file("latin1.txt")) << "caf\xe9\n";
  o.text.data = {dir_.file("latin1.txt")};
  EXPECT_TRUE(contains(message_of<FormatError>([&] { run(o); }), "UTF-8"));
  o = small();
  o.text.context = 0;  // given, so checked: never swapped for the default
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--context: must be a whole number from 1 to 1073741824, got '0'"));
  o = small();
  o.text.context = 4096;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "context")) << "more context than the validation text";

  TrainOptions saved = small("arch");
  saved.steps = 1;
  run(saved);
  TrainOptions resumed = small();
  resumed.resume_dir = saved.out_dir;
  resumed.text.layers = 3;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(resumed); }), "drop the architecture flags to resume"));
}

}  // namespace
}  // namespace weft::train
