// Every numeric (and named) flag of every subcommand, given a value it cannot take: exit status 2,
// one line on stderr that starts with "weft: --flag: ", nothing on stdout, and nothing written.
// Each command also names data or a checkpoint that does not exist, so a refusal that names the
// flag shows that the value was refused before anything was read; a good value gets past the
// flags and stops at that missing path instead.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft_cli.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::Outcome;

// Values no whole-number flag takes, whatever its range.
const std::vector<std::string> kNotWhole = {"abc", "1.5", "1e3", "0x10", "", "12abc", "99999999999999999999"};
// Values no real-number flag takes.
const std::vector<std::string> kNotReal = {"abc", "nan", "inf", "--FLAG=-inf", "1e400", "", "0x1p3", "1.5x"};

std::vector<std::string> with(std::vector<std::string> values, const std::vector<std::string>& more) {
  values.insert(values.end(), more.begin(), more.end());
  return values;
}

struct Row {
  std::string command;  // the subcommand and what it needs besides the flag; OUT: a path that must stay unwritten
  std::string flag;
  std::vector<std::string> bad;
};

const std::string kTrain = "train --model cnn --data-dir /nonexistent/weft-data --out OUT";
const std::string kGpt = "train --model gpt --data /nonexistent/weft-text --out OUT";
const std::string kEval = "eval --checkpoint /nonexistent/weft-run";
const std::string kGenerate = "generate --checkpoint /nonexistent/weft-run --prompt hi";
const std::string kQuantize = "quantize /nonexistent/weft-run --int8 --out OUT";
const std::string kPlan = "plan --model gpt";

std::vector<Row> rows() {
  const auto positive = with(kNotWhole, {"0", "-1"});
  const auto non_negative = with(kNotWhole, {"-1"});
  const auto positive_real = with(kNotReal, {"0", "-1"});
  const auto non_negative_real = with(kNotReal, {"-1", "-0.5"});
  return {
      {kTrain, "--steps", with(positive, {"1000000000001", "9223372036854775807"})},
      {kTrain, "--epochs", with(positive_real, {"1e13", "1e300"})},
      {kTrain, "--time-limit", non_negative_real},
      {kTrain, "--limit-train-batches", with(non_negative, {"1073741825"})},
      {kTrain, "--batch-size", with(positive, {"1073741825"})},
      {kTrain, "--lr", positive_real},
      {kTrain, "--weight-decay", non_negative_real},
      {kTrain, "--warmup", with(non_negative, {"1000000000001"})},
      {kTrain + " --schedule constant", "--warmup", {"10"}},
      {kTrain, "--clip-grad", non_negative_real},
      {kTrain, "--grad-accum", with(positive, {"3", "1073741825"})},
      {kTrain, "--eval-every", non_negative},
      {kTrain, "--log-every", positive},
      {kTrain, "--seed", with(kNotWhole, {"-1", "18446744073709551616"})},
      {kTrain, "--threads", with(non_negative, {"-4", "1025", "99999999999"})},
      {kTrain, "--prefetch", with(non_negative, {"1025"})},
      {kTrain, "--memory-limit", {"-5", "0", "abc", "1e300", "nan", "inf", "5XB", ""}},
      {kTrain + " --profile OUT/trace.json", "--profile-steps",
       {"0:1", "3:2", "3", "a:b", "1:99999999999999999999", "-1:2", "1:1000000000001", ""}},
      {kTrain, "--profile-steps", {"2:4"}},  // without --profile there is nothing to record them into
      {"train --model gpt --data random --out OUT", "--val-fraction", {"0.2"}},  // random tokens: nothing held out
      {"train --model gpt --data random --out OUT", "--tokenizer", {"byte"}},    // nor tokenized
      {kTrain, "--model", {"resnet", ""}},
      {kTrain, "--schedule", {"linear"}},
      {kTrain, "--optimizer", {"lion"}},
      {kTrain, "--precision", {"int8", "fp8"}},
      {kTrain + " --master-weights", "--precision", {"fp32", "fp16"}},  // master weights are for bf16
      {kTrain, "--parallel", {"zero4", "fsdp", ""}},
      {kTrain + " --parallel zero2", "--precision", {"fp16"}},  // the loss scaler is not sharded
      {"bench comm", "--min-bytes", {"0", "-1", "abc", "3", "4GiB"}},
      {"bench comm --min-bytes 1MiB", "--max-bytes", {"512KiB", "1e300"}},
      {"bench comm", "--iters", with(non_negative, {"1000001"})},
      {kTrain, "--dataset", {"cifar"}},
      {kTrain, "--layers", {"2"}},  // a GPT's flag
      {kGpt, "--layers", with(positive, {"1025"})},
      {kGpt, "--heads", with(positive, {"1073741825"})},
      {kGpt, "--dim", with(positive, {"1073741825", "130"})},  // 130: not a multiple of the 4 heads
      {kGpt, "--context", with(positive, {"1073741825"})},
      {kGpt, "--vocab", with(positive, {"1073741825"})},
      {kGpt, "--dropout", with(kNotReal, {"-0.1", "1", "2"})},
      {kGpt, "--val-fraction", with(kNotReal, {"1", "-0.5"})},
      {kGpt, "--eval-windows", non_negative},
      {kGpt, "--data-dir", {"/tmp"}},  // an image task's flag
      {kEval, "--batch-size", with(positive, {"1073741825"})},
      {kEval, "--threads", with(non_negative, {"1025"})},
      {kEval, "--model", {"gpt", "resnet"}},
      {kEval, "--dataset", {"cifar"}},
      {kGenerate, "--max-tokens", non_negative},
      {kGenerate, "--temperature", non_negative_real},
      {kGenerate, "--top-k", non_negative},
      {kGenerate, "--seed", with(kNotWhole, {"-1", "18446744073709551616"})},
      {kGenerate, "--threads", with(non_negative, {"1025"})},
      {kQuantize, "--calib", with(positive, {"1073741825"})},
      {kQuantize, "--batch-size", with(positive, {"1073741825"})},
      {kQuantize + " --observer percentile", "--percentile", with(kNotReal, {"0", "-1", "100.5", "101"})},
      {kQuantize, "--percentile", {"99"}},  // only --observer percentile reads it
      {kQuantize, "--observer", {"entropy"}},
      {kQuantize, "--seed", {"-1", "abc", "18446744073709551616"}},
      {kQuantize, "--threads", with(non_negative, {"1025"})},
      {kQuantize, "--group-size", {"32"}},  // only --int4 groups
      {kQuantize + " --dynamic", "--calib", {"4"}},
      {"quantize /nonexistent/weft-run --int4 --out OUT", "--group-size", with(positive, {"1073741825"})},
      {"quantize /nonexistent/weft-run --int4 --out OUT", "--batch-size", {"16"}},
      {"quantize /nonexistent/weft-run --int4 --out OUT", "--dynamic", {""}},
      {"tokenize train /nonexistent/weft-text --out OUT", "--vocab", with(positive, {"1048577"})},
      {"tokenize train /nonexistent/weft-text --out OUT", "--type", {"wordpiece"}},
      {"tokenize encode /nonexistent/weft-text --out OUT", "--val-fraction", with(kNotReal, {"-0.1", "1", "0.995"})},
      {kPlan, "--layers", positive},
      {kPlan, "--dim", positive},
      {kPlan, "--heads", with(positive, {"5"})},  // 5 does not divide the width 768
      {kPlan, "--vocab", positive},
      {kPlan, "--context", positive},
      {kPlan, "--batch-size", positive},
      {kPlan + " --batch-size 8", "--gpus", with(positive, {"3"})},  // 3 does not divide the batch
      {kPlan, "--zero", with(kNotWhole, {"-1", "4"})},
      {kPlan, "--precision", {"fp8"}},
      {kPlan, "--optimizer", {"lion"}},
      {kPlan, "--device", {"TPU"}},
      {kPlan + " --inference", "--kv-heads", with(positive, {"3"})},  // 3 does not divide the 4 heads
      {kPlan + " --inference", "--kv-precision", {"int8", "fp8"}},
      {kPlan + " --inference", "--precision", {"int3", "bf16-pure"}},
      {"plan", "--params", {"0", "-5", "abc", "1e300", "nan", "inf", "1.5", ""}},
      {"dtype 1", "--scale", positive_real},
      // Paths and names whose empty value would read as the flag left out.
      {kTrain, "--out", {""}},
      {kTrain, "--resume", {""}},
      {kTrain, "--profile", {""}},
      {kGpt, "--tokenizer", {""}},
      {"eval", "--checkpoint", {""}},
      {"generate --prompt hi", "--checkpoint", {""}},
      {kGenerate, "--tokenizer", {""}},
      {"quantize /nonexistent/weft-run --int8", "--out", {""}},
      {"tokenize train /nonexistent/weft-text", "--out", {""}},
      {"tokenize encode /nonexistent/weft-text --out OUT", "--tokenizer", {""}},
  };
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

class FlagsTest : public ::testing::Test {
 protected:
  // `weft COMMAND FLAG 'VALUE'` (or `FLAG=VALUE` where the value starts with "--FLAG="), with OUT a
  // path in a fresh directory: stderr, and whether stdout stayed empty and OUT unwritten.
  struct Run {
    Outcome stderr_only;
    std::string stdout_text;
    bool out_written;
  };
  Run weft(const std::string& command, const std::string& flag, const std::string& value) const {
    const std::string out = dir_.file("out");
    const std::string argument = value.starts_with("--FLAG=") ? flag + "='" + value.substr(7) + "'"
                                 : value.empty() && flag == "--dynamic" ? flag
                                                                         : flag + " '" + value + "'";
    const std::string stdout_file = dir_.file("stdout");
    Outcome o = testing::weft_cli(replaced(command, "OUT", out) + " " + argument, stdout_file);
    Run r{o, slurp(stdout_file), fs::exists(out)};
    fs::remove_all(out);
    return r;
  }
  testing::TempDir dir_;
};

// Under the sanitizers a launch costs a quarter of a second before main, and these are 400 of them:
// there each row runs its first and last bad values (the parser's own refusal and, where the row has
// one, the flag's bound), so every flag's check still runs; the optimised build runs every value.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kEveryValue = false;
#else
constexpr bool kEveryValue = true;
#endif

TEST_F(FlagsTest, EveryBadValueIsRefusedInOneLineNamingTheFlagBeforeAnythingIsRead) {
  int cases = 0;
  for (const Row& row : rows()) {
    for (size_t i = 0; i < row.bad.size(); ++i) {
      if (!kEveryValue && i != 0 && i + 1 != row.bad.size()) continue;
      const std::string& value = row.bad[i];
      SCOPED_TRACE("weft " + row.command + " " + row.flag + " '" + value + "'");
      const Run r = weft(row.command, row.flag, value);
      const std::string& line = r.stderr_only.output;
      EXPECT_EQ(r.stderr_only.status, 2) << line;
      EXPECT_TRUE(line.starts_with("weft: " + row.flag + ": ")) << line;
      EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
      EXPECT_TRUE(line.ends_with("\n")) << line;
      // No message prints a number in full fixed-point (CLI11's range check once printed DBL_MAX's
      // 309 digits).
      EXPECT_LT(line.size(), 220u) << line;
      EXPECT_EQ(r.stdout_text, "");
      EXPECT_FALSE(r.out_written);
      ++cases;
    }
  }
  EXPECT_GT(cases, kEveryValue ? 400 : 100);
}

// A refusal states the flag's bound and the value as given, in one shape.
TEST_F(FlagsTest, MessagesStateTheBoundAndTheValue) {
  auto line = [&](const std::string& command, const std::string& flag, const std::string& value) {
    return weft(command, flag, value).stderr_only.output;
  };
  EXPECT_EQ(line(kTrain, "--steps", "99999999999999999999"),
            "weft: --steps: must be a whole number of at most 9223372036854775807, got '99999999999999999999'\n");
  EXPECT_EQ(line(kTrain, "--steps", "1000000000001"),
            "weft: --steps: must be a whole number from 1 to 1000000000000, got '1000000000001'\n");
  EXPECT_EQ(line(kTrain, "--lr", "inf"), "weft: --lr: must be a finite positive number, got 'inf'\n");
  EXPECT_EQ(line(kTrain, "--epochs", "inf"), "weft: --epochs: must be a number in (0, 1e+12], got 'inf'\n");
  EXPECT_EQ(line(kTrain, "--epochs", "1e300"), "weft: --epochs: must be a number in (0, 1e+12], got '1e+300'\n");
  EXPECT_EQ(line(kEval, "--threads", "-4"), "weft: --threads: must be a whole number from 0 to 1024, got '-4'\n");
  EXPECT_EQ(line(kGenerate, "--threads", "-4"), "weft: --threads: must be a whole number from 0 to 1024, got '-4'\n");
  EXPECT_EQ(line(kGenerate, "--temperature", "nan"),
            "weft: --temperature: must be a finite non-negative number, got 'nan'\n");
  EXPECT_EQ(line(kQuantize + " --observer percentile", "--percentile", "101"),
            "weft: --percentile: must be a number in (0, 100], got '101'\n");
  EXPECT_EQ(line("dtype 1", "--scale", "0"), "weft: --scale: must be a finite positive number, got '0'\n");
  EXPECT_EQ(line(kTrain, "--model", "resnet"), "weft: --model: must be one of mlp, cnn, gpt, got 'resnet'\n");
  EXPECT_EQ(line(kTrain, "--seed", "-1"), "weft: --seed: must be a non-negative whole number, got '-1'\n");
}

// Good values, at their edges, get past the flags: the command then stops at the missing data or
// checkpoint, which it names.
TEST_F(FlagsTest, GoodEdgeValuesAreTaken) {
  const std::pair<std::string, std::string> accepted[] = {
      {kTrain, "--epochs 0.5"},          {kTrain, "--threads 1"},
      {kTrain, "--steps 1000000000000"}, {kTrain, "--steps +5"},
      {kTrain, "--batch-size 1073741824"}, {kTrain, "--lr 1e-3 --weight-decay 0 --clip-grad 0"},
      {kTrain, "--seed 18446744073709551615"}, {kTrain, "--memory-limit 512MiB --time-limit 0 --prefetch 0"},
      {kTrain, "--warmup 0 --eval-every 0 --log-every 1"},
      {kTrain + " --profile OUT/t.json", "--profile-steps 1:1"},
      {kGpt, "--layers 1024 --dropout 0 --val-fraction 0.5 --eval-windows 0"}, {kGpt, "--val-fraction 0"},
      {kEval, "--threads 1 --batch-size 1"},
      {kGenerate, "--temperature 0 --top-k 0 --max-tokens 0 --threads 1024"},
      {kQuantize, "--calib 1 --batch-size 1 --observer percentile --percentile 100"},
      {"quantize /nonexistent/weft-run --int4 --out OUT", "--group-size 1"},
      {"tokenize encode /nonexistent/weft-text --out OUT", "--val-fraction 0"},
  };
  for (const auto& [command, flags] : accepted) {
    SCOPED_TRACE("weft " + command + " " + flags);
    const std::string out = dir_.file("out");
    Outcome o = testing::weft_cli(replaced(command + " " + flags, "OUT", out));
    fs::remove_all(out);
    EXPECT_EQ(o.status, 2) << o.output;
    EXPECT_TRUE(contains(o.output, "/nonexistent/")) << o.output;
  }
  EXPECT_EQ(testing::weft_cli("plan --model gpt --zero 3 --gpus 8 --batch-size 8").status, 0);
  EXPECT_EQ(testing::weft_cli("dtype --scale 1e-30 1").status, 0);
}

// Whole numbers are decimal: a leading zero does not make CLI11's octal of it.
TEST_F(FlagsTest, WholeNumbersAreDecimal) {
  Outcome o = testing::weft_cli("plan --model cnn --batch-size 010 --json");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_EQ(testing::last_line_json(o.output)["batch"], 10);
}

}  // namespace
}  // namespace weft
