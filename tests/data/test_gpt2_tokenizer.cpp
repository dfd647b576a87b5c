// data::Gpt2Tokenizer on a hand-made vocabulary: the 256 byte tokens with id = byte value, then
// a few merges whose effects are worked out by hand below from GPT-2's algorithm (pre-tokenize
// with the pattern, then merge the lowest-ranked adjacent pair, every occurrence left to right).
// tests/infer/test_huggingface_gpt2.cpp checks the same tokenizer against OpenAI's encoder.py.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/gpt2_vocabulary.h"
#include "expect_error.h"
#include "temp_dir.h"
#include "weft/core/error.h"
#include "weft/data/tokenizer.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;
using testing::written;

// Ranks 0.., ids 256.. in this order: each merge's result is the next id.
const testing::Merges kMerges = {
    {"h", "e"},        // 256 "he"
    {" ", "t"},        // 257 " t"
    {" t", "he"},      // 258 " the"
    {"a", "a"},        // 259 "aa"
    {"e", "r"},        // 260 "er": ranked after "h e", so "her" is he + r
    {"h", "er"},       // 261 "her": never reached from "her" (see above)
    {" ", " "},        // 262 "  "
    {"e", ","},        // 263 "e,": letters and punctuation are different pieces, so never used
    {"\xC3", "\xA9"},  // 264 "é"
};

std::string vocab_json() { return testing::vocab_json(kMerges); }
std::string merges_txt(bool version_line = true) { return testing::merges_txt(kMerges, version_line); }

data::Gpt2Tokenizer tokenizer() { return data::Gpt2Tokenizer(vocab_json(), merges_txt(), "vocab.json", "merges.txt"); }

using Ids = std::vector<int32_t>;

TEST(Gpt2Tokenizer, MergesTheLowestRankedPairFirst) {
  const data::Gpt2Tokenizer t = tokenizer();
  EXPECT_EQ(t.vocab_size(), 256 + 9);
  EXPECT_EQ(t.encode("the"), (Ids{'t', 256}));        // h e (rank 0); "t he" has no rank
  EXPECT_EQ(t.encode(" the"), (Ids{258}));            // h e, then Ġ t, then Ġt he
  EXPECT_EQ(t.encode("her"), (Ids{256, 'r'}));        // h e (0) before e r (4): "he r" has no rank
  EXPECT_EQ(t.encode("err"), (Ids{260, 'r'}));
  EXPECT_EQ(t.encode("aaaaa"), (Ids{259, 259, 'a'}));  // every occurrence, left to right, in one pass
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(Gpt2Tokenizer, MergesEveryOccurrenceOfTheBestPairBeforeAnyPairThoseMergesMake) {
  // A table no BPE trainer writes (a merge ranked before the one making its left token), where
  // the order matters: in "abab", encoder.py merges both "a b" (rank 1, the best pair there), and
  // then "ab ab" has no rank. Taking "ab a" (rank 0) as soon as the first merge makes it would
  // give "aba" + "b".
  const testing::Merges merges = {{"ab", "a"}, {"a", "b"}};  // 256 "aba", 257 "ab"
  const data::Gpt2Tokenizer t(testing::vocab_json(merges), testing::merges_txt(merges), "v", "m");
  EXPECT_EQ(t.encode("abab"), (Ids{257, 257}));
  EXPECT_EQ(t.encode("aba"), (Ids{256}));  // "a b", then "ab a"
}

TEST(Gpt2Tokenizer, SplitsTextIntoGpt2sPiecesBeforeMerging) {
  const data::Gpt2Tokenizer t = tokenizer();
  EXPECT_EQ(t.encode("the other"), (Ids{'t', 256, ' ', 'o', 't', 256, 'r'}));  // "the", " other"
  EXPECT_EQ(t.encode("the,"), (Ids{'t', 256, ','}));                         // "the", ","; no e,
  // A run of spaces leaves its last one to the word after it (\s+(?!\S)), so "  " merges only at
  // the end of the text or before a newline's run.
  EXPECT_EQ(t.encode("  x"), (Ids{' ', ' ', 'x'}));
  EXPECT_EQ(t.encode("x  "), (Ids{'x', 262}));
  EXPECT_EQ(t.encode("it's"), (Ids{'i', 't', '\'', 's'}));
  // é is a letter (\p{L}), one piece with the word; ! is not.
  EXPECT_EQ(t.encode(" café!"), (Ids{' ', 'c', 'a', 'f', 264, '!'}));
  EXPECT_EQ(t.encode(" 2024"), (Ids{' ', '2', '0', '2', '4'}));
}

TEST(Gpt2Tokenizer, EncodesBytesThatAreNotUtf8AsTheirByteTokens) {
  const data::Gpt2Tokenizer t = tokenizer();
  EXPECT_EQ(t.encode("a\xff" "b"), (Ids{'a', 0xff, 'b'}));
  EXPECT_EQ(t.encode("\xC3"), (Ids{0xC3}));            // é cut short
  EXPECT_EQ(t.encode("\xC3\xA9"), (Ids{264}));         // whole
  EXPECT_EQ(t.encode("\xC3\xC3\xA9"), (Ids{0xC3, 264}));
  EXPECT_EQ(t.encode("\xED\xA0\x80"), (Ids{0xED, 0xA0, 0x80}));  // a UTF-16 surrogate is not UTF-8
}

TEST(Gpt2Tokenizer, DecodeInvertsEncodeOnAnyBytes) {
  const data::Gpt2Tokenizer t = tokenizer();
  const std::vector<std::string> texts = {
      "I'm sure they're here; we'll see, you've said it's what he'd do.",
      "Call 555-0123 in 2024, or 3.14159!",
      "Hello, world!!! (yes?) -- \"quoted\" & <tags> ...",
      "a  b   c    d\n\n\tindented\t\n   ",
      "naïve café Ωμέγα Привет 日本語 ١٢٣",
      "emoji 🙂👍🏽 ok 🇫🇷",
      std::string("nul \0 inside", 12),
      "broken \xff\xfe utf-8 \xC3 and \xF0\x9F\x99 cut",
      "the other the, aaaaa her",
  };
  for (const std::string& text : texts) EXPECT_EQ(t.decode(t.encode(text)), text) << text;
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  EXPECT_EQ(t.decode(t.encode(every_byte)), every_byte);
  EXPECT_THROW(t.decode({265}), IndexError);
}

TEST(Gpt2Tokenizer, IdentityNamesTheVocabularyAndMergesNotTheirLayout) {
  const data::Gpt2Tokenizer t = tokenizer();
  EXPECT_TRUE(t.identity().starts_with("gpt2-bpe:")) << t.identity();
  // The same tokenizer written otherwise: keys in another order, spaced, no version line.
  const data::Gpt2Tokenizer relaid(nlohmann::json::parse(vocab_json()).dump(2), merges_txt(false), "v", "m");
  EXPECT_EQ(relaid.identity(), t.identity());
  EXPECT_EQ(relaid.vocab_json(), t.vocab_json());
  EXPECT_EQ(relaid.merges_txt(), t.merges_txt());
  // Its own files read back as itself.
  const data::Gpt2Tokenizer again(t.vocab_json(), t.merges_txt(), "v", "m");
  EXPECT_EQ(again.identity(), t.identity());
  EXPECT_EQ(again.encode(" the aaaaa her"), t.encode(" the aaaaa her"));
  // One merge fewer is another tokenizer.
  std::string fewer = merges_txt();
  fewer.resize(fewer.rfind('\n', fewer.size() - 2) + 1);
  EXPECT_NE(data::Gpt2Tokenizer(vocab_json(), fewer, "v", "m").identity(), t.identity());
}

TEST(Gpt2Tokenizer, LoadsFromADirectoryAsLoadTokenizerDoes) {
  testing::TempDir dir;
  std::ofstream(dir.file("vocab.json")) << vocab_json();
  std::ofstream(dir.file("merges.txt")) << merges_txt();
  std::unique_ptr<data::Tokenizer> loaded = data::load_tokenizer(dir.path());
  EXPECT_EQ(loaded->identity(), tokenizer().identity());
  EXPECT_EQ(loaded->encode(" the"), Ids{258});
  std::filesystem::remove(dir.file("merges.txt"));
  EXPECT_TRUE(contains(message_of<IOError>([&] { data::load_tokenizer(dir.path()); }), "merges.txt is missing"));
}

TEST(Gpt2Tokenizer, RefusesMalformedFilesNamingTheFault) {
  auto refusal = [](const std::string& vocab, const std::string& merges) {
    return message_of<FormatError>([&] { data::Gpt2Tokenizer(vocab, merges, "V.json", "M.txt"); });
  };
  EXPECT_TRUE(contains(refusal("[1, 2]", merges_txt()), "V.json: expected a JSON object")) << refusal("[1, 2]", "");
  EXPECT_TRUE(contains(refusal("{\"a\": ", merges_txt()), "V.json is not valid JSON"));
  nlohmann::json vocab = nlohmann::json::parse(vocab_json());
  nlohmann::json no_byte = vocab;
  no_byte.erase(written('q'));
  no_byte[written("\xC3\xA9")] = 'q';  // the ids stay 0 .. n-1
  EXPECT_TRUE(contains(refusal(no_byte.dump(), ""), "has no token for the byte 113"));
  nlohmann::json twice = vocab;
  twice[written("he")] = 5;
  EXPECT_TRUE(contains(refusal(twice.dump(), ""), "is given to two tokens"));
  nlohmann::json not_int = vocab;
  not_int[written("he")] = "256";
  EXPECT_TRUE(contains(refusal(not_int.dump(), ""), "expected the ids 0 .. 264"));
  nlohmann::json foreign = vocab;
  foreign.erase(written("he"));
  foreign["h e"] = 256;  // a space is not in the byte alphabet
  EXPECT_TRUE(contains(refusal(foreign.dump(), ""), "is not written in GPT-2's byte alphabet"));

  const std::string good = merges_txt();
  EXPECT_TRUE(contains(refusal(vocab_json(), good + "h e r\n"), "M.txt: line 11: expected two tokens"));
  EXPECT_TRUE(contains(refusal(vocab_json(), "#version: 0.2\nh e\n\na a\n"),
                       "line 3: expected two tokens and one space between them (\"Ġ t\"), found an empty line"));
  EXPECT_TRUE(contains(refusal(vocab_json(), "h\n"), "line 1: expected two tokens"));
  EXPECT_TRUE(contains(refusal(vocab_json(), "a b\n"), "line 1: \"ab\" is not in the vocabulary"));
  EXPECT_TRUE(contains(refusal(vocab_json(), good + "h e\n"), "line 11: the merge \"h e\" is there already"));
  EXPECT_TRUE(contains(refusal(vocab_json(), "h\xff e\n"), "line 1: \"h\xEF\xBF\xBD\" is not in the vocabulary"));
}

}  // namespace
}  // namespace weft
