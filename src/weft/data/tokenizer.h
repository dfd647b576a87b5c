// Tokenizers: text to token ids and back.
//
// encode and decode are each other's inverse on any text a tokenizer accepts, and encoding
// commutes with concatenation: decode(encode(a) ++ encode(b)) == a + b. So a shard that holds
// many documents' ids back to back decodes to the documents back to back.
//
// identity() names the tokenizer exactly ("byte"; "sentencepiece:" and a 64-bit FNV-1a hash of
// the model file in hex; "gpt2-bpe:" and the same hash of the vocabulary and merges): token
// shards and checkpoints record it, and whatever reads them compares it with the tokenizer it was
// given, because ids from one vocabulary are noise in another.
//
// ByteTokenizer: ids 0..255 are the text's bytes; no file, nothing to train. decode returns the
// bytes as they are, so a window that cuts a multi-byte character decodes to a string that is
// not UTF-8 (it does not fail).
//
// SentencePieceTokenizer: BPE or unigram models of Google's SentencePiece library. Models
// trained by train_sentencepiece use byte fallback (a character outside the vocabulary becomes
// its UTF-8 bytes, never <unk>) and no normalisation (whitespace runs, newlines and Unicode
// forms kept), which is what makes encode/decode lossless.
//
// Gpt2Tokenizer: GPT-2's byte-level BPE, as OpenAI's encoder.py and Hugging Face's GPT2Tokenizer
// encode, from the same two files (vocab.json: token -> id; merges.txt: one merge a line, by
// rank). Text is split into pieces by GPT-2's pattern
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (Unicode letters and numbers, PCRE2's), each piece's bytes become the single-byte tokens, and
// the adjacent pair of lowest rank is merged, every occurrence from left to right, until no pair
// has a rank. Tokens are written in vocab.json with GPT-2's byte alphabet (each byte one printable
// character: 'Ġ' for a space). Bytes that are not UTF-8 are not text to the pattern: each is a
// piece of its own, its byte's token, so encode takes any bytes and decode gives them back.
// Strings in the text that look like special tokens ("<|endoftext|>") are encoded as text;
// decoding that token's id gives its string. No cache: encoding a piece of n bytes takes
// O(n log n), however long it is.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sentencepiece { class SentencePieceProcessor; }

namespace weft::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // An id outside [0, vocab_size()) → IndexError.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string identity() const = 0;
};

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::string identity() const override { return "byte"; }
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  // A missing or unreadable file → IOError; a file that is not a SentencePiece model → FormatError.
  static SentencePieceTokenizer load(const std::string& path);
  // The bytes of a model file; `source` names them in errors.
  SentencePieceTokenizer(const std::string& serialized_model, const std::string& source);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::string identity() const override { return identity_; }
  const std::string& serialized_model() const { return serialized_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string serialized_;
  std::string identity_;
};

class Gpt2Tokenizer : public Tokenizer {
 public:
  static constexpr const char* kVocabFile = "vocab.json";
  static constexpr const char* kMergesFile = "merges.txt";
  // DIR/vocab.json and DIR/merges.txt. A missing or unreadable file → IOError; a malformed one →
  // FormatError naming the file (and the line of merges.txt).
  static Gpt2Tokenizer load(const std::string& dir);
  // The two files' contents; the sources name them in errors. vocab.json must be a JSON object
  // whose ids are 0 .. n-1, each once, whose tokens are strings of the byte alphabet, with the 256
  // single-byte tokens among them. merges.txt may start with a "#version" line; each other line
  // is two tokens and one space between them, each token and their concatenation in the
  // vocabulary, no pair twice.
  Gpt2Tokenizer(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_source,
                const std::string& merges_source);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  std::string identity() const override { return identity_; }
  // The two files as this tokenizer writes them: the vocabulary one token a line in id order, the
  // merges by rank after a "#version: 0.2" line. The identity is the hash of these, so two files
  // that differ only in layout (order of keys, spacing, the version line) name one tokenizer.
  const std::string& vocab_json() const { return vocab_json_; }
  const std::string& merges_txt() const { return merges_txt_; }

 private:
  struct Merge {
    int32_t rank, merged;
  };
  // The tokens of one piece of text.
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;

  std::vector<std::string> tokens_;  // by id: the token's bytes
  int32_t byte_ids_[256] = {};       // each byte's single-byte token
  std::unordered_map<uint64_t, Merge> merges_;  // by (left id << 32 | right id)
  std::string vocab_json_, merges_txt_, identity_;
};

struct SentencePieceOptions {
  std::string model_type = "bpe";  // bpe | unigram
  int64_t vocab_size = 4096;
};

// Trains a model on `documents` (each one training sentence). A vocabulary the text cannot fill,
// too small for the byte-fallback pieces, or an unknown model type → ValueError with
// SentencePiece's reason. Text SentencePiece's trainers cannot take is refused before they see
// it (ValueError naming the document: names[i], else "document i+1"): a run of more than 32768
// characters without a space (BPE crashes on it, unigram fails), a document of more than 32768
// characters in a text whose spaces are too rare for SentencePiece to split at, more than 1 GiB
// of text.
SentencePieceTokenizer train_sentencepiece(const std::vector<std::string>& documents,
                                           const SentencePieceOptions& options,
                                           const std::vector<std::string>& names = {});

// "byte" → ByteTokenizer, a directory → Gpt2Tokenizer (its vocab.json and merges.txt), anything
// else is the path of a SentencePiece model file (no such file → IOError).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace weft::data
