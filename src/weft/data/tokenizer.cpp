#include "weft/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "weft/core/error.h"
#include "weft/io/atomic_file.h"

namespace weft::data {
namespace {

void check_ids(const std::vector<int32_t>& ids, int64_t vocab_size, const std::string& who) {
  for (size_t i = 0; i < ids.size(); ++i)
    WEFT_CHECK(ids[i] >= 0 && ids[i] < vocab_size, IndexError, who, ": token id ", ids[i], " at position ", i,
               " is outside the vocabulary [0, ", vocab_size, ")");
}

// Not a security hash: it only has to tell two different model files apart.
std::string fnv1a_hex(const std::string& bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char b : bytes) hash = (hash ^ b) * 0x100000001b3ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

class DocumentIterator : public sentencepiece::SentenceIterator {
 public:
  explicit DocumentIterator(const std::vector<std::string>& documents) : documents_(documents) {}
  bool done() const override { return next_ >= documents_.size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return documents_[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& documents_;
  size_t next_ = 0;
};

}  // namespace

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  check_ids(ids, vocab_size(), "ByteTokenizer::decode");
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) text[i] = static_cast<char>(ids[i]);
  return text;
}

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string& path) {
  return SentencePieceTokenizer(io::read_file(path), path);
}

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& serialized_model, const std::string& source)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()),
      serialized_(serialized_model),
      identity_("sentencepiece:" + fnv1a_hex(serialized_model)) {
  auto status = processor_->LoadFromSerializedProto(serialized_);
  WEFT_CHECK(status.ok(), FormatError, "'", source, "': expected a SentencePiece model (weft tokenize train writes ",
             "one), found a file SentencePiece cannot load (", status.ToString(), ")");
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  auto status = processor_->Encode(text, &ids);
  WEFT_CHECK(status.ok(), ValueError, "SentencePieceTokenizer::encode: ", status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  // SentencePiece does not range-check ids itself.
  check_ids(ids, vocab_size(), "SentencePieceTokenizer::decode");
  std::string text;
  auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  WEFT_CHECK(status.ok(), ValueError, "SentencePieceTokenizer::decode: ", status.ToString());
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

SentencePieceTokenizer train_sentencepiece(const std::vector<std::string>& documents,
                                           const SentencePieceOptions& options) {
  WEFT_CHECK(options.model_type == "bpe" || options.model_type == "unigram", ValueError,
             "train_sentencepiece: expected model type bpe or unigram, found '", options.model_type, "'");
  WEFT_CHECK(!documents.empty(), ValueError, "train_sentencepiece: expected at least one document, found none");
  size_t longest = 0;
  for (const std::string& d : documents) longest = std::max(longest, d.size());
  std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      // A dummy "▁" before each text would break decode(encode(a) ++ encode(b)) == a + b.
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      // SentencePiece silently drops longer sentences; a document is one sentence here.
      {"max_sentence_length", std::to_string(std::max<size_t>(longest, 4192))},
      {"minloglevel", "2"},
  };
  DocumentIterator iterator(documents);
  std::string serialized;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &iterator, &serialized);
  WEFT_CHECK(status.ok(), ValueError, "train_sentencepiece: SentencePiece could not train a ", options.model_type,
             " model of vocabulary ", options.vocab_size, " on ", documents.size(), " documents: ",
             status.ToString(), " (the vocabulary holds 3 control pieces, 256 byte-fallback pieces and the text's ",
             "characters before any merged piece; too large a vocabulary for little text fails too)");
  return SentencePieceTokenizer(serialized, "trained model");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  WEFT_CHECK(std::filesystem::is_regular_file(spec), IOError, "expected a tokenizer: 'byte' or a SentencePiece model ",
             "file, found no file '", spec, "'");
  return std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::load(spec));
}

}  // namespace weft::data
