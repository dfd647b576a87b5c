// `weft tokenize train` and `weft tokenize encode` as a user runs them, and their bad inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "weft/data/text.h"
#include "weft/data/tokenizer.h"
#include "weft_cli.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::expect_usage_error;
using testing::last_line_json;
using testing::Outcome;
using testing::weft_cli;

class TokenizeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_tokenize_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::string text;
    for (int i = 0; i < 60; ++i)
      text += "Fortune number " + std::to_string(i) + ": the early bird gets the worm, but the second mouse " +
              "gets the cheese.\n%\n";
    write("fortunes", text);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  fs::path dir_;
};

TEST_F(TokenizeCliTest, TrainsATokenizerAndEncodesShardsItsDatasetReads) {
  Outcome trained = weft_cli("tokenize train --vocab 320 --type bpe " + path("fortunes") + " --out " +
                             path("tok.model") + " --json");
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_TRUE(contains(trained.output, "trained a bpe tokenizer of 320 pieces on 60 documents")) << trained.output;
  data::SentencePieceTokenizer tokenizer = data::SentencePieceTokenizer::load(path("tok.model"));
  EXPECT_EQ(last_line_json(trained.output)["tokenizer"], tokenizer.identity());

  Outcome encoded = weft_cli("tokenize encode --tokenizer " + path("tok.model") + " " + path("fortunes") +
                             " --val-fraction 0.1 --out " + path("shards") + " --json");
  ASSERT_EQ(encoded.status, 0) << encoded.output;
  EXPECT_TRUE(contains(encoded.output, "train: 54 documents")) << encoded.output;
  EXPECT_TRUE(contains(encoded.output, "val: 6 documents")) << encoded.output;
  nlohmann::json result = last_line_json(encoded.output);
  data::TokenShard train = data::read_token_shard(path("shards/train.bin"));
  data::TokenShard val = data::read_token_shard(path("shards/val.bin"));
  data::check_shard_tokenizer(train, tokenizer);
  EXPECT_EQ(data::SentencePieceTokenizer::load(path("shards/tokenizer.model")).identity(), tokenizer.identity());
  EXPECT_EQ(result["train"]["tokens"], train.tokens.size());
  EXPECT_EQ(result["val"]["tokens"], val.tokens.size());
  std::vector<int32_t> ids(val.tokens.begin(), val.tokens.end());
  EXPECT_TRUE(tokenizer.decode(ids).starts_with("Fortune number 9: the early bird")) << tokenizer.decode(ids);
  EXPECT_EQ(data::TokenDataset(std::move(train), 16).context(), 16);

  Outcome bytes = weft_cli("tokenize encode " + path("fortunes") + " --out " + path("bytes"));
  ASSERT_EQ(bytes.status, 0) << bytes.output;
  EXPECT_TRUE(contains(bytes.output, "(1.00 bytes per token)")) << bytes.output;
  EXPECT_EQ(data::read_token_shard(path("bytes/train.bin")).tokenizer, "byte");
  EXPECT_FALSE(fs::exists(path("bytes/tokenizer.model")));  // bytes need no file
}

TEST_F(TokenizeCliTest, HoldsOutTheTailOfASingleDocumentsTokens) {
  write("one", "a document\n");
  Outcome o = weft_cli("tokenize encode " + path("one") + " --out " + path("one_shards") + " --json");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "1 document is too few to hold out whole ones: val.bin is the last 10% of the tokens"))
      << o.output;
  EXPECT_EQ(last_line_json(o.output)["split"], "tokens");
  data::TokenShard val = data::read_token_shard(path("one_shards/val.bin"));
  EXPECT_EQ(val.tokens, (std::vector<uint16_t>{'\n'}));  // floor(13 x 0.1) = 1: the "%\n"'s newline
  EXPECT_EQ(data::read_token_shard(path("one_shards/train.bin")).tokens.size(), 12u);
}

TEST_F(TokenizeCliTest, BadTextOrTokenizerExitsTwoWithOneLine) {
  write("empty", "");
  expect_usage_error(weft_cli("tokenize encode " + path("empty") + " --out " + path("out")), "is empty");
  write("latin1", "caf\xE9\n");
  expect_usage_error(weft_cli("tokenize encode " + path("latin1") + " --out " + path("out")), "byte offset 3");
  expect_usage_error(weft_cli("tokenize train --vocab 300 " + path("latin1") + " --out " + path("t.model")),
                     "expected UTF-8 text");
  write("not.model", "plain words\n");
  expect_usage_error(weft_cli("tokenize encode --tokenizer " + path("not.model") + " " + path("fortunes") + " --out " +
                              path("out")),
                     "expected a SentencePiece model");
  expect_usage_error(weft_cli("tokenize encode " + path("nowhere") + " --out " + path("out")), "nowhere");
  expect_usage_error(weft_cli("tokenize train --vocab 100 " + path("fortunes") + " --out " + path("t.model")),
                     "vocabulary 100");
  EXPECT_FALSE(fs::exists(path("t.model")));
  write("one", "a document\n");  // 13 tokens with its "%\n": a tenth of them is 1, a hundredth none
  expect_usage_error(weft_cli("tokenize encode " + path("one") + " --val-fraction 0.01 --out " + path("out")),
                     "a validation fraction of 0.01 of 13 tokens is no token: give more text, or --val-fraction 0");
  expect_usage_error(weft_cli("tokenize train " + path("fortunes")), "--out");
  expect_usage_error(weft_cli("tokenize train --type wordpiece " + path("fortunes") + " --out " + path("t.model")),
                     "wordpiece");
  expect_usage_error(weft_cli("tokenize"), "a command is needed after 'weft tokenize': train, encode");
}

}  // namespace
}  // namespace weft
