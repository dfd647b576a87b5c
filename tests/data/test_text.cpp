// Tokenizers, text documents, token shards and windows: round trips, every bad input, the fortunes.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft/data/dataloader.h"
#include "weft/data/sampler.h"
#include "weft/data/text.h"
#include "weft/data/tokenizer.h"
#include "weft/io/atomic_file.h"

namespace weft::data {
namespace {

using weft::testing::contains;
using weft::testing::message_of;
using weft::testing::TempDir;

void write_text(const std::string& path, const std::string& bytes) {
  io::write_file_atomic(path, [&](std::FILE* f) { std::fwrite(bytes.data(), 1, bytes.size(), f); });
}

// Multi-byte characters of every length: é (2 bytes), € (3), 😀 (4).
const std::string kUnicode = "Caf\xC3\xA9 costs 3\xE2\x82\xAC \xF0\x9F\x98\x80\n  two  spaces\ttab\n";

// A few KB of varied English with a handful of multi-byte characters, for SentencePiece.
std::string training_text() {
  const char* sentences[] = {
      "The quick brown fox jumps over the lazy dog.",
      "A journey of a thousand miles begins with a single step.",
      "To be or not to be, that is the question.",
      "All that glitters is not gold; all who wander are not lost.",
      "The caf\xC3\xA9 serves cr\xC3\xA8me br\xC3\xBBl\xC3\xA9""e for 5\xE2\x82\xAC on Sundays.",
      "Programs must be written for people to read, and only incidentally for machines to execute.",
      "Simplicity is prerequisite for reliability.",
      "In theory there is no difference between theory and practice; in practice there is.",
  };
  std::string text;
  for (int round = 0; round < 12; ++round)
    for (const char* s : sentences) text += std::string(s) + (round % 3 == 2 ? "\n" : " ");
  return text;
}

std::vector<std::string> training_documents() {
  std::vector<std::string> documents;
  std::string text = training_text();
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    documents.push_back(text.substr(start, end + 1 - start));
    start = end + 1;
  }
  return documents;
}

// Training takes about a second; the tests below share one model.
const SentencePieceTokenizer& small_bpe() {
  static SentencePieceTokenizer tokenizer = train_sentencepiece(training_documents(), {"bpe", 400});
  return tokenizer;
}

TEST(ByteTokenizer, RoundTripsUtf8WithMultiByteCharacters) {
  ByteTokenizer tokenizer;
  std::vector<int32_t> ids = tokenizer.encode(kUnicode);
  ASSERT_EQ(ids.size(), kUnicode.size());
  EXPECT_EQ(ids[3], 0xC3);
  EXPECT_EQ(ids[4], 0xA9);
  EXPECT_EQ(tokenizer.decode(ids), kUnicode);
  EXPECT_EQ(tokenizer.vocab_size(), 256);
  EXPECT_EQ(tokenizer.identity(), "byte");
}

TEST(ByteTokenizer, DecodesACutCharacterToItsBytesAndRejectsIdsOutsideTheVocabulary) {
  ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.decode({0xE2, 0x82}), "\xE2\x82");
  std::string message = message_of<IndexError>([&] { tokenizer.decode({65, 256}); });
  EXPECT_TRUE(contains(message, "token id 256 at position 1 is outside the vocabulary [0, 256)")) << message;
  EXPECT_THROW(tokenizer.decode({-1}), IndexError);
}

TEST(SentencePieceTokenizer, TrainsBpeAndRoundTripsTextIncludingUnseenCharacters) {
  const SentencePieceTokenizer& tokenizer = small_bpe();
  EXPECT_EQ(tokenizer.vocab_size(), 400);
  std::string seen = "The quick brown fox jumps over the lazy dog.\n";
  std::vector<int32_t> ids = tokenizer.encode(seen);
  EXPECT_LT(ids.size(), seen.size() * 2 / 3) << "BPE should merge the training text's words";
  EXPECT_EQ(tokenizer.decode(ids), seen);
  // Characters it never saw go through byte fallback, whitespace runs and newlines are kept.
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(kUnicode)), kUnicode);
  // Encoding commutes with concatenation, which is what lets a shard hold documents back to back.
  std::vector<int32_t> joined = tokenizer.encode(seen);
  for (int32_t id : tokenizer.encode(kUnicode)) joined.push_back(id);
  EXPECT_EQ(tokenizer.decode(joined), seen + kUnicode);
  EXPECT_THROW(tokenizer.decode({400}), IndexError);
}

TEST(SentencePieceTokenizer, TrainsUnigramAndSavesAModelThatLoadsWithTheSameIdentity) {
  SentencePieceTokenizer trained = train_sentencepiece(training_documents(), {"unigram", 320});
  TempDir dir;
  write_text(dir.file("tok.model"), trained.serialized_model());
  SentencePieceTokenizer loaded = SentencePieceTokenizer::load(dir.file("tok.model"));
  EXPECT_EQ(loaded.identity(), trained.identity());
  EXPECT_TRUE(loaded.identity().starts_with("sentencepiece:"));
  EXPECT_NE(loaded.identity(), small_bpe().identity());
  EXPECT_EQ(loaded.encode(kUnicode), trained.encode(kUnicode));
  EXPECT_EQ(loaded.decode(loaded.encode(kUnicode)), kUnicode);
  EXPECT_EQ(load_tokenizer(dir.file("tok.model"))->identity(), trained.identity());
  EXPECT_EQ(load_tokenizer("byte")->identity(), "byte");
}

TEST(SentencePieceTokenizer, RejectsAFileThatIsNoModelAndVocabulariesItCannotTrain) {
  TempDir dir;
  write_text(dir.file("not.model"), "hello, I am text\n");
  std::string message = message_of<FormatError>([&] { SentencePieceTokenizer::load(dir.file("not.model")); });
  EXPECT_TRUE(contains(message, "not.model': expected a SentencePiece model")) << message;
  EXPECT_THROW(SentencePieceTokenizer::load(dir.file("missing.model")), IOError);
  message = message_of<IOError>([&] { load_tokenizer("bytes"); });
  EXPECT_TRUE(contains(message, "expected a tokenizer: 'byte', a SentencePiece model file or a directory of GPT-2's "
                                "vocab.json and merges.txt, found no file 'bytes'"))
      << message;
  // The byte-fallback pieces alone take 256 entries.
  message = message_of<ValueError>([] { train_sentencepiece(training_documents(), {"bpe", 100}); });
  EXPECT_TRUE(contains(message, "vocabulary 100")) << message;
  EXPECT_THROW(train_sentencepiece(training_documents(), {"wordpiece", 400}), ValueError);
}

// SentencePiece's trainer drops every document that holds U+2585, its own marker, without a word
// (a corpus of nothing else failed with "!sentences_.empty()"): weft refuses the text instead.
TEST(SentencePieceTokenizer, RefusesTheCharacterItsTrainerReserves) {
  std::vector<std::string> documents = training_documents();
  documents[3] += " a bar \xe2\x96\x85 chart";
  const std::string message = message_of<ValueError>([&] { train_sentencepiece(documents, {"bpe", 400}); });
  EXPECT_TRUE(contains(message, "document 4: holds U+2585")) << message;
}

// SentencePiece's BPE trainer packs a character's index within a word into 16 bits of an int: a
// word of 40 KB (a base64 blob on one line) crashed it with SIGSEGV, and its trainers end the
// process on longer ones. Such text is refused before SentencePiece sees it, naming the document.
TEST(SentencePieceTokenizer, RefusesTextItsTrainersCannotTakeNamingTheDocument) {
  std::vector<std::string> documents = training_documents();
  std::string blob;
  for (int i = 0; blob.size() < 40000; ++i) blob += "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0" + std::to_string(i % 10) + "/+";
  documents.push_back("an attachment: " + blob + "\n");
  std::vector<std::string> names(documents.size() - 1, "fine");
  names.push_back("mail.txt, document 7");
  for (const char* type : {"bpe", "unigram"}) {
    std::string message = message_of<ValueError>([&] { train_sentencepiece(documents, {type, 400}, names); });
    EXPECT_TRUE(contains(message, str("mail.txt, document 7: has ", blob.size() + 2, " characters without a space")))
        << message;
    EXPECT_TRUE(contains(message, "more than 32768")) << message;
  }
  EXPECT_TRUE(contains(message_of<ValueError>([&] { train_sentencepiece(documents, {"bpe", 400}); }),
                       str("document ", documents.size(), ": has")));

  // Spaces this rare fall under SentencePiece's character coverage and split nothing: the whole
  // document is one word.
  std::string sparse;
  while (sparse.size() < 40000) sparse += std::string(4000, 'x') + " ";
  std::string message = message_of<ValueError>([&] { train_sentencepiece({sparse}, {"bpe", 300}); });
  EXPECT_TRUE(contains(message, "document 1: has 40010 characters, and spaces are so rare in the text (10 of 40010"))
      << message;

  // Characters are counted as SentencePiece decodes UTF-8: 20000 three-byte characters are a
  // word of 20000, within the limit.
  std::string wide;
  for (int i = 0; i < 20000; ++i) wide += "\xe6\x97\xa5";
  documents.back() = "a long word: " + wide + "\n";
  EXPECT_NO_THROW(train_sentencepiece(documents, {"bpe", 400}));
}

TEST(SentencePieceTokenizer, RefusesModelFilesThatAreNotRegularFilesOrAreCut) {
  TempDir dir;
  write_text(dir.file("cut.model"), small_bpe().serialized_model().substr(0, 1000));
  std::string message = message_of<FormatError>([&] { SentencePieceTokenizer::load(dir.file("cut.model")); });
  EXPECT_TRUE(contains(message, "cut.model': expected a SentencePiece model")) << message;
  // A directory is GPT-2's tokenizer (data::Gpt2Tokenizer), and this one lacks its files.
  message = message_of<IOError>([&] { load_tokenizer(dir.path()); });
  EXPECT_TRUE(contains(message, "vocab.json is missing")) << message;
  message = message_of<IOError>([&] { load_tokenizer("/dev/zero"); });
  EXPECT_TRUE(contains(message, "expected a regular file, found a character device")) << message;
  std::filesystem::create_symlink("loop", dir.file("loop"));
  message = message_of<IOError>([&] { load_tokenizer(dir.file("loop")); });
  EXPECT_TRUE(contains(message, dir.file("loop"))) << message;
}

TEST(TextDocuments, SplitsAtSeparatorLinesAndEndsEachDocumentWithANewline) {
  TempDir dir;
  write_text(dir.file("f"), "first\nfortune\n%\nsecond\n%\n%\n50% off\nthird");
  EXPECT_EQ(read_text_documents(dir.file("f")),
            (std::vector<std::string>{"first\nfortune\n", "second\n", "50% off\nthird\n"}));
  write_text(dir.file("plain"), kUnicode);
  EXPECT_EQ(read_text_documents(dir.file("plain")), std::vector<std::string>{kUnicode});
}

TEST(TextDocuments, RejectsEmptyTextAndNamesTheOffsetOfInvalidUtf8) {
  TempDir dir;
  write_text(dir.file("empty"), "");
  std::string message = message_of<FormatError>([&] { read_text_documents(dir.file("empty")); });
  EXPECT_TRUE(contains(message, "empty' is empty: expected UTF-8 text")) << message;
  write_text(dir.file("separators"), "%\n%\n");
  message = message_of<FormatError>([&] { read_text_documents(dir.file("separators")); });
  EXPECT_TRUE(contains(message, "holds no text")) << message;

  // Latin-1 é, an overlong "/", a surrogate, a code point above U+10FFFF, a cut character and a
  // stray continuation byte, each after 11 good bytes that end on line 2.
  const std::string prefix = "ok\n\xC3\xA9 valid";
  for (const std::string& bad : {std::string("\xE9t\xE9"), std::string("\xC0\xAF"), std::string("\xED\xA0\x80"),
                                 std::string("\xF4\x90\x80\x80"), std::string("\xE2\x82"), std::string("\x80")}) {
    write_text(dir.file("bad"), prefix + bad);
    message = message_of<FormatError>([&] { read_text_documents(dir.file("bad")); });
    EXPECT_TRUE(contains(message, "bad': expected UTF-8 text")) << message;
    EXPECT_TRUE(contains(message, "at byte offset 11 (line 2)")) << message;
  }
  EXPECT_THROW(read_text_documents(dir.file("missing")), IOError);
}

TEST(TextDocuments, ExpandsDirectoriesToTheirTextFilesOnly) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("corpus"));
  write_text(dir.file("corpus/b"), "b\n");
  write_text(dir.file("corpus/a"), "a\n");
  write_text(dir.file("corpus/a.dat"), "index");
  write_text(dir.file("corpus/notes.md"), "not read");
  write_text(dir.file("corpus/chapter.txt"), "c\n");
  std::filesystem::create_symlink("a", dir.file("corpus/a.u8"));
  write_text(dir.file("single.md"), "d\n");
  EXPECT_EQ(expand_text_paths({dir.file("single.md"), dir.file("corpus")}),
            (std::vector<std::string>{dir.file("single.md"), dir.file("corpus/a"), dir.file("corpus/b"),
                                      dir.file("corpus/chapter.txt")}));
  EXPECT_THROW(expand_text_paths({dir.file("nothing")}), IOError);
  std::filesystem::create_directory(dir.file("no-text"));
  std::string message = message_of<IOError>([&] { expand_text_paths({dir.file("no-text")}); });
  EXPECT_TRUE(contains(message, "found an empty directory; put the text in *.txt files there")) << message;
  for (const char* name : {"a.md", "b.csv", "c.json", "d.html"}) write_text(dir.file(std::string("no-text/") + name), "x");
  message = message_of<IOError>([&] { expand_text_paths({dir.file("no-text")}); });
  EXPECT_TRUE(contains(message, "found only a.md, b.csv, c.json and 1 more")) << message;
}

TEST(TextDocuments, TellsTokenShardsFromText) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("shards"));
  write_token_shard(dir.file("shards/train.bin"), tokenize_documents({"a\n"}, ByteTokenizer{}));
  EXPECT_TRUE(is_token_shard_path(dir.file("shards")));
  EXPECT_TRUE(is_token_shard_path(dir.file("shards/train.bin")));
  EXPECT_TRUE(is_token_shard_path(dir.file("missing.bin")));  // read as a shard, so its error names the file
  EXPECT_FALSE(is_token_shard_path(dir.path()));
  EXPECT_FALSE(is_token_shard_path(dir.file("text.txt")));
}

TEST(DocumentSplit, SpreadsTheValidationShareEvenlyAndDeterministically) {
  std::vector<std::string> documents;
  for (int i = 0; i < 20; ++i) documents.push_back(std::to_string(i) + "\n");
  DocumentSplit split = split_documents(documents, 0.1);
  EXPECT_EQ(split.val, (std::vector<std::string>{"9\n", "19\n"}));
  EXPECT_EQ(split.train.size(), 18u);
  EXPECT_EQ(split_documents(documents, 0.25).val.size(), 5u);
  EXPECT_TRUE(split_documents(documents, 0).val.empty());
  EXPECT_THROW(split_documents(documents, 1), ValueError);
  EXPECT_THROW(split_documents(documents, -0.1), ValueError);
}

// Token i is i (mod the vocabulary), so a token's value says where in the text it came from.
TokenShard counting_shard(int64_t tokens) {
  TokenShard shard{"byte", 65536, {}, {}};
  for (int64_t i = 0; i < tokens; ++i) shard.tokens.push_back(static_cast<uint16_t>(i));
  return shard;
}

TEST(TokenSplit, HoldsOutTheTailOfTheTokensWithNoTokenInBoth) {
  for (double fraction : {0.05, 0.1, 0.3}) {
    ShardSplit split = split_token_tail(counting_shard(1000), fraction);
    const auto val_tokens = static_cast<size_t>(1000 * fraction + 1e-9);
    ASSERT_EQ(split.val.tokens.size(), val_tokens) << fraction;
    ASSERT_EQ(split.train.tokens.size(), 1000 - val_tokens) << fraction;
    EXPECT_TRUE(split.by_tokens);
    EXPECT_EQ(split.val.tokenizer, "byte");
    // Every token any window reads, inputs and targets, of training and of validation: the two
    // sets are disjoint and together the whole text.
    const int64_t context = 8;
    std::vector<int> seen(1000, 0);
    TokenDataset train(split.train, context), val(split.val, context, context);
    for (const TokenDataset* data : {&train, &val}) {
      std::vector<int64_t> all(static_cast<size_t>(data->size()));
      for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int64_t>(k);
      Batch batch = data->get_batch(all);
      std::vector<int> mine(1000, 0);
      for (const Tensor* t : {&batch.inputs, &batch.targets})
        for (int64_t token : t->to_vector<int64_t>()) mine[token] = 1;
      for (int i = 0; i < 1000; ++i) seen[i] += mine[i];
    }
    for (int i = 0; i < 1000; ++i) ASSERT_LE(seen[i], 1) << "token " << i << " is read by training and validation";
    EXPECT_EQ(seen[999 - val_tokens], 1);  // the last training token is a target
    EXPECT_EQ(seen[1000 - val_tokens], 1);  // the first validation token is an input
  }
  EXPECT_TRUE(split_token_tail(counting_shard(1000), 0).val.tokens.empty());
  EXPECT_EQ(split_token_tail(counting_shard(19), 0.1).val.tokens.size(), 1u);
  EXPECT_THROW(split_token_tail(counting_shard(10), 1), ValueError);
}

TEST(TokenSplit, SplitsByDocumentWhereTheFractionHoldsOneAndByTheTokensOtherwise) {
  ByteTokenizer bytes;
  std::vector<std::string> documents;
  for (int i = 0; i < 20; ++i) documents.push_back("doc " + std::to_string(i) + "\n");
  ShardSplit by_documents = tokenize_split(documents, 0.1, bytes);
  EXPECT_FALSE(by_documents.by_tokens);
  std::vector<int32_t> val(by_documents.val.tokens.begin(), by_documents.val.tokens.end());
  EXPECT_EQ(bytes.decode(val), "doc 9\n%\ndoc 19\n%\n");

  ShardSplit one = tokenize_split({std::string(100, 'a') + std::string(9, 'b') + "\n"}, 0.1, bytes);  // 112 tokens
  EXPECT_TRUE(one.by_tokens);
  std::vector<int32_t> tail(one.val.tokens.begin(), one.val.tokens.end());
  EXPECT_EQ(bytes.decode(tail), std::string(8, 'b') + "\n%\n");  // floor(112 x 0.1) = 11 tokens
  EXPECT_EQ(one.train.tokens.size() + one.val.tokens.size(), 112u);

  ShardSplit none = tokenize_split(documents, 0, bytes);
  EXPECT_TRUE(none.val.tokens.empty());
  EXPECT_EQ(none.train.tokens, tokenize_documents(documents, bytes).tokens);
}

TEST(TokenShard, TokenizesDocumentsWithSeparatorsAndRoundTripsThroughAFile) {
  ByteTokenizer bytes;
  TokenShard shard = tokenize_documents({"one\n", "tw\xC3\xB8\n"}, bytes);
  std::vector<int32_t> ids(shard.tokens.begin(), shard.tokens.end());
  EXPECT_EQ(bytes.decode(ids), "one\n%\ntw\xC3\xB8\n%\n");
  TempDir dir;
  write_token_shard(dir.file("train.bin"), shard);
  EXPECT_EQ(std::filesystem::file_size(dir.file("train.bin")), 32 + 4 + 2 * shard.tokens.size());
  TokenShard read = read_token_shard(dir.file("train.bin"));
  EXPECT_EQ(read.tokens, shard.tokens);
  EXPECT_EQ(read.tokenizer, "byte");
  EXPECT_EQ(read.vocab_size, 256);
  EXPECT_EQ(read.path, dir.file("train.bin"));
  check_shard_tokenizer(read, bytes);

  const SentencePieceTokenizer& bpe = small_bpe();
  TokenShard bpe_shard = tokenize_documents({"The quick brown fox.\n", kUnicode}, bpe);
  write_token_shard(dir.file("bpe.bin"), bpe_shard);
  TokenShard bpe_read = read_token_shard(dir.file("bpe.bin"));
  EXPECT_EQ(bpe_read.tokens, bpe_shard.tokens);
  EXPECT_EQ(bpe_read.tokenizer, bpe.identity());
  std::vector<int32_t> bpe_ids(bpe_read.tokens.begin(), bpe_read.tokens.end());
  EXPECT_EQ(bpe.decode(bpe_ids), "The quick brown fox.\n%\n" + kUnicode + "%\n");
  check_shard_tokenizer(bpe_read, bpe);
}

TEST(TokenShard, RejectsATokenizerOtherThanTheOneThatMadeIt) {
  TempDir dir;
  write_token_shard(dir.file("train.bin"), tokenize_documents({"abc\n"}, ByteTokenizer{}));
  TokenShard shard = read_token_shard(dir.file("train.bin"));
  std::string message = message_of<ValueError>([&] { check_shard_tokenizer(shard, small_bpe()); });
  EXPECT_TRUE(contains(message, "train.bin' was made by tokenizer byte (vocab 256), not by the given sentencepiece:"))
      << message;
  TokenShard bpe_shard = tokenize_documents({"abc\n"}, small_bpe());
  EXPECT_THROW(check_shard_tokenizer(bpe_shard, ByteTokenizer{}), ValueError);
}

TEST(TokenShard, RejectsMalformedFilesNamingThem) {
  TempDir dir;
  std::string path = dir.file("shard.bin");
  write_token_shard(path, tokenize_documents({"hello\n"}, ByteTokenizer{}));
  const std::string good = io::read_file(path);
  auto expect_format_error = [&](const std::string& bytes, const std::string& says) {
    write_text(path, bytes);
    std::string message = message_of<FormatError>([&] { read_token_shard(path); });
    EXPECT_TRUE(contains(message, "shard.bin")) << message;
    EXPECT_TRUE(contains(message, says)) << message;
  };
  expect_format_error(good.substr(0, 20), "expected a 32-byte header, found 20 bytes");
  expect_format_error(good.substr(0, good.size() - 3), "the header says 8 tokens, the file holds 6");
  expect_format_error(good + "x", "found 1 trailing bytes");
  expect_format_error("GGUF" + good.substr(4), "not a weft token shard");
  std::string version = good;
  version[8] = 7;
  expect_format_error(version, "expected token shard version 1, found 7");
  // A vocabulary of 100 makes every letter of "hello" (104 and up) an id outside it.
  std::string small_vocab = good;
  small_vocab[16] = 100;
  small_vocab[17] = 0;
  expect_format_error(small_vocab, "token id 104 at position 0 is outside the vocabulary [0, 100)");
  std::string wrong_token = good;
  wrong_token[36] = 0x00;
  wrong_token[37] = 0x01;  // token 0 becomes 256
  expect_format_error(wrong_token, "token id 256 at position 0 is outside the vocabulary [0, 256)");
  std::string line_break = good;
  line_break[34] = '\n';  // in "byte"
  expect_format_error(line_break, "printable ASCII");
  expect_format_error(line_break, "found byte 10 at offset 2");
  EXPECT_THROW(read_token_shard(dir.file("missing.bin")), IOError);
}

TokenShard counting_shard(int n) {
  TokenShard shard{"byte", 256, {}, {}};
  for (int i = 0; i < n; ++i) shard.tokens.push_back(static_cast<uint16_t>(i % 256));
  return shard;
}

TEST(TokenDataset, WindowsHaveTargetsShiftedByOne) {
  TokenDataset dataset(counting_shard(20), 4);
  EXPECT_EQ(dataset.size(), 16);  // starts 0..15: the last window's targets end at token 19
  Batch batch = dataset.get_batch({0, 15, 7});
  EXPECT_EQ(batch.inputs.dtype(), DType::i64);
  EXPECT_EQ(batch.inputs.shape(), (Shape{3, 4}));
  EXPECT_EQ(batch.targets.shape(), (Shape{3, 4}));
  EXPECT_EQ(batch.inputs.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 15, 16, 17, 18, 7, 8, 9, 10}));
  EXPECT_EQ(batch.targets.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 16, 17, 18, 19, 8, 9, 10, 11}));
  EXPECT_THROW(dataset.get_batch({16}), IndexError);
  EXPECT_THROW(dataset.get_batch({-1}), IndexError);
}

TEST(TokenDataset, StrideEqualToTheContextTilesTheShard) {
  TokenDataset dataset(counting_shard(21), 5, 5);
  EXPECT_EQ(dataset.size(), 4);
  Batch batch = dataset.get_batch({3});
  EXPECT_EQ(batch.inputs.to_vector<int64_t>(), (std::vector<int64_t>{15, 16, 17, 18, 19}));
  EXPECT_EQ(batch.targets.to_vector<int64_t>(), (std::vector<int64_t>{16, 17, 18, 19, 20}));
  EXPECT_EQ(TokenDataset(counting_shard(20), 5, 5).size(), 3);
}

TEST(TokenDataset, RejectsAShardTooShortForOneWindow) {
  std::string message = message_of<ValueError>([] { TokenDataset(counting_shard(4), 4); });
  EXPECT_TRUE(contains(message, "a window of 4 tokens needs 5 tokens")) << message;
  EXPECT_NO_THROW(TokenDataset(counting_shard(5), 4));
  EXPECT_THROW(TokenDataset(counting_shard(10), 0), ValueError);
  EXPECT_THROW(TokenDataset(counting_shard(10), 2, 0), ValueError);
}

TEST(ReplacementSampler, DrawsTheSameWindowsForASeedAndDifferentOnesPerEpoch) {
  ReplacementSampler sampler(1000, 64, 7);
  EXPECT_EQ(sampler.size(), 64);
  std::vector<int64_t> epoch0 = sampler.indices(0);
  EXPECT_EQ(epoch0, ReplacementSampler(1000, 64, 7).indices(0));
  EXPECT_NE(epoch0, sampler.indices(1));
  EXPECT_NE(epoch0, ReplacementSampler(1000, 64, 8).indices(0));
  for (int64_t i : epoch0) EXPECT_TRUE(i >= 0 && i < 1000) << i;
  // Uniform over the population: 100000 draws from 10 values land about 10000 on each.
  std::vector<int64_t> counts(10);
  for (int64_t i : ReplacementSampler(10, 100000, 1).indices(0)) ++counts[i];
  for (int64_t c : counts) EXPECT_NEAR(c, 10000, 500);
  EXPECT_THROW(ReplacementSampler(0, 1, 0), ValueError);
  EXPECT_THROW(ReplacementSampler(10, -1, 0), ValueError);
}

TEST(TokenDataset, FeedsTheDataLoaderTheSameRandomWindowsWithPrefetchOrWithout) {
  auto dataset = std::make_shared<TokenDataset>(counting_shard(300), 8);
  auto sampler = std::make_shared<ReplacementSampler>(dataset->size(), 40, 3);
  DataLoader prefetching(dataset, sampler, 16, false, 2), direct(dataset, sampler, 16, false, 0);
  prefetching.start_epoch(0);
  direct.start_epoch(0);
  int batches = 0;
  while (std::optional<Batch> a = prefetching.next()) {
    std::optional<Batch> b = direct.next();
    ASSERT_TRUE(b);
    EXPECT_EQ(a->inputs.to_vector<int64_t>(), b->inputs.to_vector<int64_t>());
    std::vector<int64_t> inputs = a->inputs.to_vector<int64_t>(), targets = a->targets.to_vector<int64_t>();
    for (size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(targets[i], (inputs[i] + 1) % 256);
    ++batches;
  }
  EXPECT_EQ(batches, 3);
}

TEST(TokenDataset, LoadsTheFortunesCorpus) {
  if (!std::filesystem::exists(kFortunesDir)) GTEST_SKIP() << "the fortunes package is not installed";
  std::vector<std::string> files = expand_text_paths({kFortunesDir});
  EXPECT_GT(files.size(), 20u);
  std::vector<std::string> documents;
  for (const std::string& file : files)
    for (std::string& d : read_text_documents(file)) documents.push_back(std::move(d));
  EXPECT_GT(documents.size(), 5000u);
  DocumentSplit split = split_documents(documents, 0.1);
  EXPECT_NEAR(static_cast<double>(split.val.size()), static_cast<double>(documents.size()) / 10, 1);
  ByteTokenizer bytes;
  TokenShard shard = tokenize_documents(split.train, bytes);
  EXPECT_GT(shard.tokens.size(), 2'000'000u);
  TokenDataset dataset(std::move(shard), 256);
  Batch batch = dataset.get_batch(ReplacementSampler(dataset.size(), 4, 0).indices(0));
  EXPECT_EQ(batch.inputs.shape(), (Shape{4, 256}));
}

}  // namespace
}  // namespace weft::data
