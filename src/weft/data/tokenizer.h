// Tokenizers: text to token ids and back.
//
// encode and decode are each other's inverse on any text a tokenizer accepts, and encoding
// commutes with concatenation: decode(encode(a) ++ encode(b)) == a + b. So a shard that holds
// many documents' ids back to back decodes to the documents back to back.
//
// identity() names the tokenizer exactly ("byte", or "sentencepiece:" and a 64-bit FNV-1a hash
// of the model file in hex): token shards and checkpoints record it, and whatever reads them
// compares it with the tokenizer it was given, because ids from one vocabulary are noise in
// another.
//
// ByteTokenizer: ids 0..255 are the text's bytes; no file, nothing to train. decode returns the
// bytes as they are, so a window that cuts a multi-byte character decodes to a string that is
// not UTF-8 (it does not fail).
//
// SentencePieceTokenizer: BPE or unigram models of Google's SentencePiece library. Models
// trained by train_sentencepiece use byte fallback (a character outside the vocabulary becomes
// its UTF-8 bytes, never <unk>) and no normalisation (whitespace runs, newlines and Unicode
// forms kept), which is what makes encode/decode lossless.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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

// "byte" → ByteTokenizer, anything else is the path of a SentencePiece model file (no such file →
// IOError).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace weft::data
