// `weft train --model gpt` as a user runs it: the JSON line, flags that belong to another model,
// and every kind of --data: a text file, a directory of them, token shards, and their refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "temp_dir.h"
#include "weft_cli.h"

namespace weft::testing {
namespace {

TEST(TrainGptCli, PrintsTheResultAsJson) {
  TempDir dir;
  {
    std::ofstream text(dir.file("text.txt"));
    for (int i = 0; i < 100; ++i) text << "line " << i << " of a small corpus\n%\n";
  }
  Outcome o = weft_cli("train --model gpt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --steps 3 --threads 1 "
                       "--data " + dir.file("text.txt") + " --out " + dir.file("run") + " --json");
  ASSERT_EQ(o.status, 0) << o.output;
  nlohmann::json result = last_line_json(o.output);
  for (const char* key : {"train_tokens_per_s", "val_loss", "val_bits_per_byte", "params", "wall_s", "peak_allocated_bytes"})
    EXPECT_TRUE(result.contains(key)) << key << " in " << result.dump();
  EXPECT_EQ(result["steps"], 3);
  EXPECT_EQ(result["tokens"], 3 * 4 * 8);
  EXPECT_TRUE(contains(o.output, "weft generate --checkpoint " + dir.file("run"))) << o.output;
}

// The architecture --help says a GPT defaults to is the one a run without those flags builds.
TEST(TrainGptCli, HelpShowsTheArchitectureItBuilds) {
  const std::string help = weft_cli("train --help").output;
  Outcome o = weft_cli("train --model gpt --data random --steps 1 --batch-size 2 --threads 1 --json");
  ASSERT_EQ(o.status, 0) << o.output;
  const nlohmann::json result = last_line_json(o.output);
  for (const char* flag : {"--layers", "--heads", "--dim", "--context"})
    EXPECT_EQ(std::to_string(result[std::string(flag).substr(2)].get<int64_t>()), help_default(help, flag)) << flag;
  EXPECT_EQ(help_default(help, "--model"), "cnn");
  EXPECT_EQ(result["optimizer"], help_default(help, "--optimizer"));
  EXPECT_EQ(result["precision"], help_default(help, "--precision"));
  EXPECT_EQ(result["schedule"], help_default(help, "--schedule"));
}

TEST(TrainGptCli, RejectsFlagsOfAnotherModel) {
  expect_usage_error(weft_cli("train --model cnn --layers 2"), "--layers: is not a flag of --model cnn");
  expect_usage_error(weft_cli("train --model gpt --dataset mnist"), "--dataset: is not a flag of --model gpt");
  expect_usage_error(weft_cli("train --model cnn --tokenizer byte"), "--tokenizer: is not a flag of --model cnn");
  expect_usage_error(weft_cli("train --model mlp --epochs 0"), "--epochs: must be a number in (0, 1e+12], got '0'");
  expect_usage_error(weft_cli("train --model gpt --steps 0"), "--steps: must be a whole number from 1 to 1000000000000, got '0'");
  expect_usage_error(weft_cli("train --optimizer lion"), "--optimizer: must be one of sgd, momentum (SGD with momentum), adam, adamw, got 'lion'");
  expect_usage_error(weft_cli("train --profile t.json --profile-steps 3"), "--profile-steps: must be FIRST:LAST, two step numbers, got '3'");
  expect_usage_error(weft_cli("train --profile t.json --profile-steps 4:2"), "1 <= FIRST <= LAST <= 1000000000000, got '4:2'");
  expect_usage_error(weft_cli("train --precision int8"), "--precision");
  expect_usage_error(weft_cli("train --model gpt --data /nonexistent/text"), "/nonexistent/text");
}

// A tiny GPT, two steps: each run takes a fraction of a second.
const std::string kTiny = "train --model gpt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --steps 2 --threads 1 ";

// Prose without separator lines: one document of about 4 KB.
void write_prose(const std::string& path) {
  std::ofstream text(path);
  for (int i = 0; i < 100; ++i) text << "Sentence " << i << " of a story that has no separators.\n";
}

TEST(TrainGptCli, TrainsOnOneTextFileHoldingOutTheTailOfItsTokens) {
  TempDir dir;
  write_prose(dir.file("story.txt"));
  Outcome o = weft_cli(kTiny + "--data " + dir.file("story.txt") + " --json");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "validation: the last 5% of the tokens (1 document: too few to hold out whole ones)"))
      << o.output;
  const auto bytes = static_cast<int64_t>(std::filesystem::file_size(dir.file("story.txt"))) + 2;  // and "%\n"
  EXPECT_TRUE(contains(o.output, std::to_string(bytes - bytes / 20) + " training tokens, " + std::to_string(bytes / 20) +
                                     " validation tokens"))
      << o.output;
  EXPECT_TRUE(last_line_json(o.output)["val_loss"].is_number()) << o.output;
}

TEST(TrainGptCli, TrainsOnADirectoryOfTextFilesReadingOnlyTheTxtOnes) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("book"));
  for (const char* name : {"one.txt", "two.txt", "three.txt"}) write_prose(dir.file(std::string("book/") + name));
  std::ofstream(dir.file("book/cover.png")) << "\x89PNG not text";
  Outcome o = weft_cli(kTiny + "--data " + dir.file("book") + " --val-fraction 0.34");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "validation: 1 of 3 documents, spread evenly")) << o.output;

  std::filesystem::create_directory(dir.file("empty"));
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("empty")),
                     "empty': expected text files (*.txt, or names without an extension), found an empty directory; "
                     "put the text in *.txt files there, or name a file itself");
}

TEST(TrainGptCli, TrainsWithoutValidationAtValFractionZero) {
  TempDir dir;
  write_prose(dir.file("story.txt"));
  Outcome o = weft_cli(kTiny + "--data " + dir.file("story.txt") + " --val-fraction 0 --json");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "no validation (--val-fraction 0)")) << o.output;
  EXPECT_TRUE(contains(o.output, "step 2: no validation set (--val-fraction 0)")) << o.output;
  const auto bytes = static_cast<int64_t>(std::filesystem::file_size(dir.file("story.txt"))) + 2;
  EXPECT_TRUE(contains(o.output, std::to_string(bytes) + " training tokens")) << o.output;
  EXPECT_TRUE(last_line_json(o.output)["val_loss"].is_null()) << o.output;

  ASSERT_EQ(weft_cli("tokenize encode " + dir.file("story.txt") + " --val-fraction 0 --out " + dir.file("s")).status, 0);
  Outcome shards = weft_cli(kTiny + "--data " + dir.file("s"));
  ASSERT_EQ(shards.status, 0) << shards.output;
  EXPECT_TRUE(contains(shards.output, "no validation set (" + dir.file("s/val.bin") +
                                          " is empty: weft tokenize encode --val-fraction 0)"))
      << shards.output;
}

TEST(TrainGptCli, TrainsOnTheShardsOfTokenizeEncodeWithTheTokenizerThatMadeThem) {
  TempDir dir;
  {
    std::ofstream text(dir.file("fortunes"));
    for (int i = 0; i < 60; ++i) text << "Fortune " << i << ": the early bird gets the worm, the second mouse the cheese.\n%\n";
  }
  ASSERT_EQ(weft_cli("tokenize encode " + dir.file("fortunes") + " --out " + dir.file("bytes")).status, 0);
  Outcome bytes = weft_cli(kTiny + "--data " + dir.file("bytes") + " --json");
  ASSERT_EQ(bytes.status, 0) << bytes.output;
  EXPECT_TRUE(contains(bytes.output, "validation: " + dir.file("bytes/val.bin"))) << bytes.output;
  EXPECT_EQ(last_line_json(bytes.output)["tokenizer"], "byte");
  Outcome files = weft_cli(kTiny + "--data " + dir.file("bytes/train.bin") + " " + dir.file("bytes/val.bin"));
  EXPECT_EQ(files.status, 0) << files.output;

  Outcome made = weft_cli("tokenize train --vocab 300 " + dir.file("fortunes") + " --out " + dir.file("tok.model"));
  ASSERT_EQ(made.status, 0) << made.output;
  Outcome encoded = weft_cli("tokenize encode --tokenizer " + dir.file("tok.model") + " " + dir.file("fortunes") +
                             " --out " + dir.file("bpe"));
  ASSERT_EQ(encoded.status, 0) << encoded.output;
  EXPECT_TRUE(contains(encoded.output, "train on them: " WEFT_CLI_PATH " train --model gpt --data " + dir.file("bpe"))) << encoded.output;
  Outcome bpe = weft_cli(kTiny + "--data " + dir.file("bpe") + " --json");  // finds bpe/tokenizer.model
  ASSERT_EQ(bpe.status, 0) << bpe.output;
  EXPECT_TRUE(contains(last_line_json(bpe.output)["tokenizer"].get<std::string>(), "sentencepiece:")) << bpe.output;
  EXPECT_EQ(last_line_json(bpe.output)["vocab"], 300);
  const std::string resumable = "train --model gpt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --threads 1 ";
  ASSERT_EQ(weft_cli(resumable + "--steps 2 --data " + dir.file("bpe") + " --out " + dir.file("run")).status, 0);
  Outcome resumed = weft_cli(resumable + "--steps 3 --data " + dir.file("bpe") + " --resume " + dir.file("run") + " --json");
  ASSERT_EQ(resumed.status, 0) << resumed.output;  // the checkpoint's tokenizer, checked against the shards
  EXPECT_EQ(last_line_json(resumed.output)["steps"], 3);

  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("bpe") + " --tokenizer byte"),
                     "was made by tokenizer sentencepiece:");
  std::filesystem::remove(dir.file("bpe/tokenizer.model"));
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("bpe")),
                     "and no tokenizer.model sits beside it: pass that tokenizer's model file with --tokenizer");
  EXPECT_EQ(weft_cli(kTiny + "--data " + dir.file("bpe") + " --tokenizer " + dir.file("tok.model")).status, 0);
}

TEST(TrainGptCli, RefusesBadShardsSayingWhatToDo) {
  TempDir dir;
  write_prose(dir.file("story.txt"));
  ASSERT_EQ(weft_cli("tokenize encode " + dir.file("story.txt") + " --out " + dir.file("s")).status, 0);
  std::string shard;
  {
    std::ifstream in(dir.file("s/train.bin"), std::ios::binary);
    shard.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(dir.file("cut.bin"), std::ios::binary) << shard.substr(0, shard.size() - 7);
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("cut.bin")),
                     "truncated token shard: the header says " + std::to_string((shard.size() - 36) / 2) +
                         " tokens, the file holds " + std::to_string((shard.size() - 36 - 7) / 2) +
                         " (re-encode the text with weft tokenize encode)");
  std::string out_of_vocabulary = shard;
  out_of_vocabulary[out_of_vocabulary.size() - 1] = 1;  // token 256 + the last byte
  std::ofstream(dir.file("oov.bin"), std::ios::binary) << out_of_vocabulary;
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("oov.bin")), "is outside the vocabulary [0, 256)");
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("s") + " --val-fraction 0.2"),
                     "--val-fraction: is not a flag of token shards (weft tokenize encode --val-fraction split them");
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("s") + " " + dir.file("story.txt")),
                     "--data: names token shards and text together");
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("s/val.bin")), "--data: names only validation shards");
  std::filesystem::remove(dir.file("s/val.bin"));
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("s")), "holds train.bin but no val.bin");
}

TEST(TrainGptCli, RefusesTextTooShortSayingWhichFlagToChange) {
  TempDir dir;
  write_prose(dir.file("story.txt"));
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("story.txt") + " --val-fraction 0.001"),
                     "tokens; use a shorter --context, a larger --val-fraction, or --val-fraction 0 (no validation)");
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("story.txt") + " --val-fraction 0.0001"),
                     "--val-fraction 0.0001 of 4692 tokens is no token: give more text, a larger --val-fraction, or --val-fraction 0");
  std::ofstream(dir.file("short.txt")) << "short\n";  // 8 tokens with its "%\n"
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("short.txt") + " --val-fraction 0"),
                     "--context 8: a window needs 9 tokens (inputs and next-token targets), and there are 8 training tokens; use a shorter --context, or more text");
  std::ofstream(dir.file("empty.txt")) << "";
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("empty.txt")), "is empty: expected UTF-8 text (leave the file out");
  expect_usage_error(weft_cli(kTiny + "--data " + dir.file("story.txt") + " --val-fraction 1"), "--val-fraction");
}

// A GPT whose f32 weights alone exceed any machine's memory is refused before it is built (at
// --layers 1024 --dim 8192 the run allocated until the OS stopped it), its size in the message.
TEST(TrainGptCli, RefusesAModelLargerThanTheMachine) {
  expect_usage_error(weft_cli("train --model gpt --data random --steps 1 --layers 1024 --dim 65536"),
                     "the GPT of 1024 layers of width 65536 (--layers, --dim) has 52777455845376 parameters: 192.00 TiB "
                     "of f32 weights alone, more than this machine's ");
  expect_usage_error(weft_cli("train --model gpt --data random --steps 1 --dim 1073741824 --heads 1"),
                     "has more than 2^63 parameters: more than 8 EiB of f32 weights alone");
}

// A batch whose step cannot fit is refused before the data is read, as weft plan would predict it
// (a tiny GPT at --batch-size 1000000 grew to the machine's 24 GB before the OS stopped it), with
// what to do instead.
TEST(TrainGptCli, RefusesAStepLargerThanTheMachine) {
  const std::string tiny = "train --model gpt --data random --steps 1 --layers 1 --heads 2 --dim 32 --context 32 ";
  expect_usage_error(weft_cli(tiny + "--batch-size 1000000"),
                     "a step of 1000000 sequences of 32 tokens (--batch-size 1000000) needs about ");
  expect_usage_error(weft_cli(tiny + "--batch-size 1000000 --grad-accum 2"),
                     "a step of 500000 sequences of 32 tokens (--batch-size 1000000, --grad-accum 2) needs about ");
  // Micro-batches of one still gather the step's ids whole: at 2^30 sequences, 1 GB/s until the
  // OS stopped it, or "internal error: std::bad_alloc" under a ulimit.
  expect_usage_error(weft_cli(tiny + "--batch-size 1073741824 --grad-accum 1073741824"),
                     "--batch-size 1073741824: a step's 1073741824 sequences of 32 tokens take 512.00 GiB of token ids "
                     "alone, more than this machine's ");
}

}  // namespace
}  // namespace weft::testing
