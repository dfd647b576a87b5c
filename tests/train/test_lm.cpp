// The GPT training loop (train/lm.h): it learns, resumes bit-identically, and its checkpoints,
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
#include "weft/train/lm.h"

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

  LMOptions small(const std::string& out = "") const {
    LMOptions o;
    o.model = {.layers = 2, .heads = 2, .dim = 32, .context = 16, .vocab = 0};
    o.data = {corpus()};
    o.val_fraction = 0.1;
    o.batch_size = 8;
    o.steps = 30;
    o.lr = 1e-2;
    o.threads = 2;
    o.log_every = 10;
    if (!out.empty()) o.out_dir = dir_.file(out);
    return o;
  }
  LMResult run(const LMOptions& o) {
    std::ostringstream log;
    LMResult r = train_language_model(o, log, false);
    log_ = log.str();
    return r;
  }

  testing::TempDir dir_;
  std::string log_;
};

std::vector<float> weights_of(const std::string& dir) {
  std::vector<float> all;
  for (const auto& [name, t] : io::load_safetensors(dir + "/model.safetensors").tensors)
    for (float x : t.to_vector<float>()) all.push_back(x);
  return all;
}

TEST_F(LMTest, LearnsAndReportsBitsPerByte) {
  LMResult r = run(small());
  EXPECT_EQ(r.steps, 30);
  EXPECT_EQ(r.tokens, 30 * 8 * 16);
  EXPECT_EQ(r.model.vocab, 256) << "the byte tokenizer's";
  EXPECT_GT(r.params, 0);
  // Byte tokens: bits per byte is the loss in bits.
  EXPECT_NEAR(r.val_bits_per_byte, r.val_loss / std::log(2.0), 1e-9);
  EXPECT_LT(r.val_bits_per_byte, r.unigram_bits_per_byte) << "context helps: " << log_;
  EXPECT_LT(r.val_loss, 0.7 * std::log(256.0)) << log_;
  EXPECT_GT(r.train_tokens_per_s, 0);
  EXPECT_GT(r.peak_allocated_bytes, 0);
  EXPECT_TRUE(contains(log_, "unigram baseline")) << log_;
}

TEST_F(LMTest, ResumedRunEqualsAnUninterruptedOne) {
  LMOptions whole = small("whole");
  whole.schedule = "constant";  // cosine's horizon is the run's length; constant depends on the step alone
  whole.steps = 12;
  run(whole);
  LMOptions first = whole;
  first.out_dir = dir_.file("split");
  first.steps = 5;
  run(first);
  LMOptions rest = first;
  rest.resume_dir = rest.out_dir;
  rest.steps = 12;
  rest.model = {.layers = 0, .heads = 0, .dim = 0, .context = 0, .vocab = 0};  // from the checkpoint
  LMResult r = run(rest);
  EXPECT_TRUE(contains(log_, "resumed from")) << log_;
  EXPECT_EQ(r.steps, 12);
  EXPECT_EQ(r.tokens, 7 * 8 * 16) << "this run's tokens";
  EXPECT_EQ(weights_of(whole.out_dir), weights_of(rest.out_dir));
}

TEST_F(LMTest, GradientAccumulationAndCheckpointingKeepTheUpdate) {
  LMOptions plain = small("plain");
  plain.steps = 4;
  const double loss = run(plain).val_loss;
  LMOptions accumulated = plain;
  accumulated.out_dir = dir_.file("accumulated");
  accumulated.grad_accum = 4;
  accumulated.checkpoint_activations = true;
  LMResult r = run(accumulated);
  EXPECT_EQ(r.micro_batch, 2);
  EXPECT_NEAR(r.val_loss, loss, 1e-5);
  // Adam divides by the gradient's running RMS, so a summation-order difference in a gradient
  // near zero moves its weight by a visible fraction of lr (1e-2): 1e-5 is 0.1% of it.
  std::vector<float> a = weights_of(plain.out_dir), b = weights_of(accumulated.out_dir);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << "weight " << i;
}

TEST_F(LMTest, Bf16TrainsCloseToFp32) {
  LMOptions fp32 = small();
  LMResult full = run(fp32);
  LMOptions bf16 = small();
  bf16.precision = "bf16";
  LMResult low = run(bf16);
  EXPECT_NEAR(low.val_loss, full.val_loss, 0.1 * full.val_loss);
}

TEST_F(LMTest, RandomDataNeedsNoTextAndHasNoBitsPerByte) {
  LMOptions o = small();
  o.data = {"random"};
  o.model.vocab = 1000;
  o.steps = 3;
  o.eval_windows = 4;
  LMResult r = run(o);
  EXPECT_EQ(r.model.vocab, 1000);
  EXPECT_TRUE(std::isnan(r.val_bits_per_byte));
  EXPECT_NEAR(r.val_loss, std::log(1000.0), 0.2) << "uniform random tokens cannot be predicted";
}

TEST_F(LMTest, TimeLimitPlansTheStepsAndStops) {
  LMOptions o = small();
  o.steps = 0;
  o.time_limit = 2;
  LMResult r = run(o);
  EXPECT_TRUE(contains(log_, "time limit 2 s: about")) << log_;
  EXPECT_GT(r.steps, 0);
  EXPECT_LT(r.wall_s, 2 + 10) << "the limit covers training; setup and the last evaluation come on top";
}

TEST_F(LMTest, CheckpointRebuildsTheModelForInference) {
  LMOptions o = small("saved");
  o.steps = 2;
  run(o);
  infer::LoadedModel loaded = infer::load_model(o.out_dir);
  EXPECT_EQ(loaded.gpt->config.layers, 2);
  EXPECT_EQ(loaded.gpt->config.context, 16);
  EXPECT_EQ(loaded.tokenizer->identity(), "byte");
  EXPECT_FALSE(loaded.model->is_training());
}

TEST_F(LMTest, RejectsATokenizerThatIsNotTheCheckpoints) {
  LMOptions o = small("bytes");
  o.steps = 2;
  run(o);
  std::vector<std::string> documents;
  for (int i = 0; i < 200; ++i) documents.push_back("some words and more words " + std::to_string(i) + "\n");
  data::SentencePieceTokenizer other = data::train_sentencepiece(documents, {.model_type = "bpe", .vocab_size = 300});
  const std::string path = dir_.file("other.model");
  std::ofstream(path, std::ios::binary) << other.serialized_model();
  std::string message = message_of<ValueError>([&] { infer::load_model(o.out_dir, {.tokenizer = path}); });
  EXPECT_TRUE(contains(message, "does not match the checkpoint")) << message;
  EXPECT_TRUE(contains(message, "trained with byte")) << message;

  LMOptions resumed = small();
  resumed.resume_dir = o.out_dir;
  resumed.tokenizer = path;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(resumed); }), "does not match the checkpoint"));
}

TEST_F(LMTest, SentencePieceTokenizerTravelsWithTheCheckpoint) {
  std::vector<std::string> documents;
  for (int i = 0; i < 200; ++i) documents.push_back("the cat sat on the mat " + std::to_string(i) + "\n");
  data::SentencePieceTokenizer tokenizer = data::train_sentencepiece(documents, {.model_type = "bpe", .vocab_size = 300});
  const std::string path = dir_.file("tok.model");
  std::ofstream(path, std::ios::binary) << tokenizer.serialized_model();
  LMOptions o = small("pieces");
  o.tokenizer = path;
  o.steps = 2;
  LMResult r = run(o);
  EXPECT_EQ(r.model.vocab, 300);
  EXPECT_EQ(r.tokenizer, tokenizer.identity());
  std::filesystem::remove(path);
  infer::LoadedModel loaded = infer::load_model(o.out_dir);
  EXPECT_EQ(loaded.tokenizer->identity(), tokenizer.identity()) << "read from the checkpoint's tokenizer.model";
}

TEST_F(LMTest, RejectsBadOptionsAndData) {
  LMOptions o = small();
  o.model.vocab = 100;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--vocab 100 is smaller than the tokenizer's vocabulary of 256"));
  o = small();
  o.grad_accum = 3;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "--grad-accum 3 must be a positive divisor"));
  o = small();
  o.model.heads = 3;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "must be a positive multiple of --heads 3"));
  o = small();
  std::ofstream(dir_.file("empty.txt")).flush();
  o.data = {dir_.file("empty.txt")};
  EXPECT_TRUE(contains(message_of<FormatError>([&] { run(o); }), "empty.txt"));
  o = small();
  std::ofstream(dir_.file("latin1.txt")) << "caf\xe9\n";
  o.data = {dir_.file("latin1.txt")};
  EXPECT_TRUE(contains(message_of<FormatError>([&] { run(o); }), "UTF-8"));
  o = small();
  o.model.context = 4096;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(o); }), "context")) << "more context than the validation text";

  LMOptions saved = small("arch");
  saved.steps = 1;
  run(saved);
  LMOptions resumed = small();
  resumed.resume_dir = saved.out_dir;
  resumed.model.layers = 3;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { run(resumed); }), "drop the architecture flags to resume"));
}

}  // namespace
}  // namespace weft::train
