#include "weft/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "weft/core/error.h"
#include "weft/io/input_file.h"

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

// What SentencePiece 0.1.97's trainers can take. Both split each training sentence (a document
// here) into words at spaces: a word is a run of spaces and the characters up to the next one
// (SplitIntoWords, with whitespace-only pieces allowed). BPE packs a character's index within its
// word into 16 bits of an int (EncodePos in bpe_model_trainer.h), so a word of more than 32769
// characters corrupts the index (SIGSEGV) or fails a CHECK that ends the process; unigram's EM
// turns NaN, which ends the process too, on words of about 100,000 characters and more. Spaces
// split only while SentencePiece keeps them: it drops the rarest characters that make up 0.05%
// of the text (character_coverage 0.9995), and when spaces are among them a document is one
// word. Characters are counted as its UTF-8 decoder counts them: one per well-formed sequence,
// one per byte of an ill-formed one.
constexpr size_t kMaxWordCharacters = 32768;
// The unigram trainer indexes the whole corpus with 32-bit integers (a suffix array over its
// distinct words), and max_sentence_length stops at 2^30.
constexpr size_t kMaxTrainingBytes = size_t{1} << 30;

// The length of the well-formed UTF-8 sequence at text[i], or 1 for an ill-formed byte.
size_t utf8_length(std::string_view text, size_t i) {
  auto byte = [&](size_t k) -> unsigned { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0; };
  auto trail = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return byte(k) >= lo && byte(k) <= hi; };
  const unsigned lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return trail(1) ? 2 : 1;
  if (lead >= 0xE0 && lead <= 0xEF) {
    const bool second = lead == 0xE0 ? trail(1, 0xA0) : lead == 0xED ? trail(1, 0x80, 0x9F) : trail(1);
    return second && trail(2) ? 3 : 1;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const bool second = lead == 0xF0 ? trail(1, 0x90) : lead == 0xF4 ? trail(1, 0x80, 0x8F) : trail(1);
    return second && trail(2) && trail(3) ? 4 : 1;
  }
  return 1;
}

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // U+2581, SentencePiece's space
// U+2585, which SentencePiece's trainer keeps for itself (a boundary marker): it silently drops
// every training sentence that holds one.
constexpr std::string_view kReservedSymbol = "\xe2\x96\x85";

// The longest word of `document` as SentencePiece's trainer splits it (see above), in characters.
struct Words {
  size_t characters = 0, spaces = 0;
  size_t longest = 0, longest_at = 0;  // characters, and its byte offset
};
Words words_of(std::string_view document) {
  Words w;
  size_t length = 0, start = 0;
  bool after_space = false;
  for (size_t i = 0; i < document.size();) {
    const bool space = document[i] == ' ' || document.substr(i, 3) == kSpaceSymbol;
    const size_t n = document[i] == ' ' ? 1 : utf8_length(document, i);
    if (space && !after_space && i > 0) length = 0, start = i;
    after_space = space;
    ++length;
    ++w.characters;
    w.spaces += space;
    if (length > w.longest) w.longest = length, w.longest_at = start;
    i += n;
  }
  return w;
}

void check_trainable(const std::vector<std::string>& documents, const std::vector<std::string>& names) {
  auto name = [&](size_t i) { return i < names.size() ? names[i] : str("document ", i + 1); };
  size_t bytes = 0, characters = 0, spaces = 0;
  std::vector<Words> words;
  for (const std::string& document : documents) {
    const size_t reserved = document.find(kReservedSymbol);
    WEFT_CHECK(reserved == std::string::npos, ValueError, name(words.size()), ": holds U+2585 (\xe2\x96\x85) at byte ",
               reserved, ", a character SentencePiece's trainer reserves: it would silently leave out every document "
               "that holds one; replace the character");
    bytes += document.size();
    WEFT_CHECK(bytes <= kMaxTrainingBytes, ValueError, "train_sentencepiece: the text is more than ",
               kMaxTrainingBytes, " bytes, more than SentencePiece's trainers take; train on a sample of it");
    words.push_back(words_of(document));
    characters += words.back().characters;
    spaces += words.back().spaces;
  }
  // Spaces survive the coverage cut when they are at least 0.1% of the characters (twice the
  // 0.05% cut, so that no tie or rounding in SentencePiece's count can drop them).
  const bool spaces_split = spaces * 1000 > characters;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (spaces_split || words[i].longest > kMaxWordCharacters) {
      WEFT_CHECK(words[i].longest <= kMaxWordCharacters, ValueError, name(i), ": has ", words[i].longest,
                 " characters without a space (from its byte ", words[i].longest_at, "); SentencePiece's trainers crash ",
                 "on more than ", kMaxWordCharacters, ": remove the run (encoded data?) or break it with spaces");
    } else {
      WEFT_CHECK(words[i].characters <= kMaxWordCharacters, ValueError, name(i), ": has ", words[i].characters,
                 " characters, and spaces are so rare in the text (", spaces, " of ", characters,
                 " characters) that SentencePiece would not split at them; its trainers crash on more than ",
                 kMaxWordCharacters, " characters without a split: break the text into shorter documents");
    }
  }
}

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

// weft trains at most 2^20 pieces (--vocab) of at most 16 characters each, about 100 MB as a
// model file at worst; the bound leaves room for models trained elsewhere.
constexpr uint64_t kMaxModelBytes = 256 << 20;

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string& path) {
  return SentencePieceTokenizer(io::read_input(path, kMaxModelBytes), path);
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
                                           const SentencePieceOptions& options,
                                           const std::vector<std::string>& names) {
  WEFT_CHECK(options.model_type == "bpe" || options.model_type == "unigram", ValueError,
             "train_sentencepiece: expected model type bpe or unigram, found '", options.model_type, "'");
  WEFT_CHECK(!documents.empty(), ValueError, "train_sentencepiece: expected at least one document, found none");
  check_trainable(documents, names);
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
  std::error_code error;
  WEFT_CHECK(std::filesystem::symlink_status(spec, error).type() != std::filesystem::file_type::not_found, IOError,
             "expected a tokenizer: 'byte' or a SentencePiece model file, found no file '", spec,
             "' (weft tokenize train --out FILE writes one)");
  return std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::load(spec));
}

}  // namespace weft::data
