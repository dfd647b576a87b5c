#include "weft/data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "weft/core/error.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"

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


// GPT-2's byte alphabet (bytes_to_unicode in OpenAI's encoder.py): the printable bytes of
// Latin-1 stand for themselves, the other 68 for the code points 256, 257, ... in byte order.
struct ByteAlphabet {
  char32_t of_byte[256];
  std::unordered_map<char32_t, uint8_t> byte_of;
  ByteAlphabet() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      of_byte[b] = printable ? static_cast<char32_t>(b) : next++;
      byte_of[of_byte[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// A token as vocab.json and merges.txt write it (its bytes in the byte alphabet).
std::string token_text(std::string_view bytes) {
  std::string text;
  for (unsigned char b : bytes) append_utf8(text, byte_alphabet().of_byte[b]);
  return text;
}

// A token's bytes from its written form (valid UTF-8, as nlohmann's parser guarantees for
// vocab.json; merges.txt is checked), or nullopt when a character is outside the alphabet.
std::optional<std::string> token_bytes(std::string_view text) {
  std::string bytes;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    const auto lead = static_cast<unsigned char>(text[i]);
    if (n == 1 && lead >= 0x80) return std::nullopt;
    char32_t c = n == 1 ? lead : n == 2 ? lead & 0x1F : n == 3 ? lead & 0x0F : lead & 0x07;
    for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    auto it = byte_alphabet().byte_of.find(c);
    if (it == byte_alphabet().byte_of.end()) return std::nullopt;
    bytes += static_cast<char>(it->second);
    i += n;
  }
  return bytes;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// GPT-2's pre-tokenizer, compiled once (PCRE2's compiled code is shared by threads; each match
// has its own match data).
class PiecePattern {
 public:
  PiecePattern() {
    static constexpr const char* kPattern =
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                          &error, &offset, nullptr);
    WEFT_CHECK(code_ != nullptr, ValueError, "GPT-2's pre-tokenizer pattern does not compile with this PCRE2 (error ",
               error, " at ", offset, ")");
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // where the JIT is missing, the interpreter matches alike
  }
  ~PiecePattern() { pcre2_code_free(code_); }
  PiecePattern(const PiecePattern&) = delete;
  PiecePattern& operator=(const PiecePattern&) = delete;

  // Calls piece(begin, end) for each piece of `text`, which must be valid UTF-8, in order; the
  // pieces tile the text.
  template <typename Piece>
  void split(std::string_view text, Piece&& piece) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    WEFT_CHECK(match != nullptr, OutOfMemoryError, "Gpt2Tokenizer::encode: no memory for PCRE2's match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t at = 0;
    while (at < text.size()) {
      const int found = pcre2_match(code_, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
      const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
      // Every character is a letter, a number, a space or another: some alternative matches at
      // each position, so a failed or empty match cannot happen; the rest is one piece if it did.
      if (found < 0 || range[0] != at || range[1] <= at) {
        piece(at, text.size());
        return;
      }
      piece(at, range[1]);
      at = range[1];
    }
  }

 private:
  pcre2_code* code_ = nullptr;
};

const PiecePattern& piece_pattern() {
  static const PiecePattern pattern;
  return pattern;
}

// Bounds the two files: GPT-2's are 1 MB and 0.5 MB; larger vocabularies of the same kind fit.
constexpr uint64_t kMaxBpeFileBytes = 256 << 20;

}  // namespace

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& dir) {
  const std::string vocab = (std::filesystem::path(dir) / kVocabFile).string();
  const std::string merges = (std::filesystem::path(dir) / kMergesFile).string();
  for (const std::string& file : {vocab, merges}) {
    std::error_code error;
    WEFT_CHECK(std::filesystem::exists(file, error), IOError, "expected GPT-2's tokenizer files in ", dir,
               ": vocab.json and merges.txt; ", file, " is missing");
  }
  return Gpt2Tokenizer(io::read_input(vocab, kMaxBpeFileBytes), io::read_input(merges, kMaxBpeFileBytes), vocab,
                       merges);
}

Gpt2Tokenizer::Gpt2Tokenizer(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_source,
                             const std::string& merges_source) {
  const nlohmann::json vocab = io::parse_json(vocab_json, vocab_source);
  WEFT_CHECK(vocab.is_object() && !vocab.empty(), FormatError, vocab_source,
             ": expected a JSON object of tokens and their ids ({\"!\": 0, ...}), found ", io::json_excerpt(vocab));
  tokens_.resize(vocab.size());
  std::vector<bool> seen(vocab.size());
  std::unordered_map<std::string, int32_t> id_of;  // by the token's written form
  for (const auto& [text, id] : vocab.items()) {
    const int64_t n = static_cast<int64_t>(vocab.size());
    WEFT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < n, FormatError, vocab_source,
               ": the id of token ", io::json_excerpt(nlohmann::json(text)), " is ", io::json_excerpt(id),
               "; expected the ids 0 .. ", n - 1, ", one per token");
    const auto index = static_cast<size_t>(id.get<int64_t>());
    WEFT_CHECK(!seen[index], FormatError, vocab_source, ": id ", index,
               " is given to two tokens; expected the ids 0 .. ", n - 1, ", one per token");
    seen[index] = true;
    std::optional<std::string> bytes = token_bytes(text);
    WEFT_CHECK(bytes.has_value() && !bytes->empty(), FormatError, vocab_source, ": token ",
               io::json_excerpt(nlohmann::json(text)), " (id ", index,
               ") is not written in GPT-2's byte alphabet (a byte-level BPE vocabulary, as GPT-2's vocab.json)");
    tokens_[index] = std::move(*bytes);
    id_of.emplace(text, static_cast<int32_t>(index));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(token_text(std::string(1, static_cast<char>(b))));
    WEFT_CHECK(it != id_of.end(), FormatError, vocab_source, ": has no token for the byte ", b, " (",
               io::json_excerpt(nlohmann::json(token_text(std::string(1, static_cast<char>(b))))),
               "); a byte-level BPE vocabulary holds all 256");
    byte_ids_[b] = it->second;
  }

  merges_txt_ = "#version: 0.2\n";
  size_t line_number = 0;
  for (size_t at = 0; at < merges_txt.size();) {
    const size_t end = std::min(merges_txt.find('\n', at), merges_txt.size());
    const std::string_view line = merges_txt.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (line_number == 1 && line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    const bool two = space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                     line.find(' ', space + 1) == std::string_view::npos;
    auto quoted = [&] { return io::json_excerpt(nlohmann::json(std::string(line))); };
    WEFT_CHECK(two, FormatError, merges_source, ": line ", line_number, ": expected two tokens and one space "
               "between them (\"Ġ t\"), found ", line.empty() ? "an empty line" : quoted());
    const std::string left(line.substr(0, space)), right(line.substr(space + 1));
    for (const std::string& token : {left, right, left + right})
      WEFT_CHECK(id_of.contains(token), FormatError, merges_source, ": line ", line_number, ": ",
                 io::json_excerpt(nlohmann::json(token)), " is not in the vocabulary");
    const int32_t rank = static_cast<int32_t>(merges_.size());
    const bool added = merges_.emplace(pair_key(id_of[left], id_of[right]), Merge{rank, id_of[left + right]}).second;
    WEFT_CHECK(added, FormatError, merges_source, ": line ", line_number, ": the merge ", quoted(),
               " is there already");
    merges_txt_ += str(left, " ", right, "\n");
  }

  vocab_json_ = "{\n";
  for (size_t id = 0; id < tokens_.size(); ++id)
    vocab_json_ +=
        str("  ", nlohmann::json(token_text(tokens_[id])).dump(), ": ", id, id + 1 < tokens_.size() ? ",\n" : "\n");
  vocab_json_ += "}\n";
  identity_ = "gpt2-bpe:" + fnv1a_hex(vocab_json_ + merges_txt_);
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  // The piece as a list of tokens (linked by index; a token starts at its node's byte), and a
  // queue of the adjacent pairs that have a rank, lowest rank first and then leftmost. The pairs
  // of one rank are merged in one pass, left to right, as encoder.py merges every occurrence of
  // its best pair; the pairs those merges make wait until the pass ends.
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> token(static_cast<size_t>(n)), next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    token[i] = byte_ids_[static_cast<unsigned char>(piece[static_cast<size_t>(i)])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Candidate {
    int32_t rank, left, left_token, right_token, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0 || token[left] < 0 || next[left] < 0) return;
    auto it = merges_.find(pair_key(token[left], token[next[left]]));
    if (it != merges_.end()) queue.push({it->second.rank, left, token[left], token[next[left]], it->second.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  std::vector<int32_t> changed;
  while (!queue.empty()) {
    const int32_t rank = queue.top().rank;
    changed.clear();
    while (!queue.empty() && queue.top().rank == rank) {
      const Candidate c = queue.top();
      queue.pop();
      // A merged token is longer than either part, so a node whose token is still the one queued,
      // followed by the token queued, is that pair unchanged.
      if (token[c.left] != c.left_token || next[c.left] < 0 || token[next[c.left]] != c.right_token) continue;
      const int32_t right = next[c.left];
      token[c.left] = c.merged;
      token[right] = -1;
      next[c.left] = next[right];
      if (next[right] >= 0) prev[next[right]] = c.left;
      changed.push_back(prev[c.left]);
      changed.push_back(c.left);
    }
    for (int32_t left : changed) consider(left);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = next[i]) ids.push_back(token[i]);
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  // Runs of valid UTF-8 go through the pattern; each other byte is a piece of its own.
  size_t run = 0;
  auto flush = [&](size_t end) {
    const std::string_view valid = text.substr(run, end - run);
    piece_pattern().split(valid,
                          [&](size_t begin, size_t stop) { encode_piece(valid.substr(begin, stop - begin), ids); });
  };
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    if (n == 1 && static_cast<unsigned char>(text[i]) >= 0x80) {
      flush(i);
      ids.push_back(byte_ids_[static_cast<unsigned char>(text[i])]);
      run = i + 1;
    }
    i += n;
  }
  flush(text.size());
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  check_ids(ids, vocab_size(), "Gpt2Tokenizer::decode");
  std::string text;
  for (int32_t id : ids) text += tokens_[static_cast<size_t>(id)];
  return text;
}

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
  if (io::is_directory(spec)) return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::load(spec));
  std::error_code error;
  WEFT_CHECK(std::filesystem::symlink_status(spec, error).type() != std::filesystem::file_type::not_found, IOError,
             "expected a tokenizer: 'byte', a SentencePiece model file or a directory of GPT-2's vocab.json and "
             "merges.txt, found no file '", spec,
             "' (weft tokenize train --out FILE writes one)");
  return std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::load(spec));
}

}  // namespace weft::data
