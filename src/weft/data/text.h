// Text data for language models: text files → documents → token shards → windows of tokens.
//
// Documents. A text file is UTF-8 (checked: invalid bytes are a FormatError naming the file and
// the byte offset) and splits into documents at lines that hold only the separator ("%" by
// default: the fortune files' format); a file without such lines is one document. Every document
// ends with "\n" (one is added where the text lacks it); empty documents are dropped. A file
// with no text at all is a FormatError.
//
// Split. Document i of the whole list goes to validation when floor((i + 1) f) > floor(i f) for
// the validation fraction f: exactly floor(n f) documents, spread evenly through the list
// (rather than its tail, which for the fortunes would be the last topics alone), the same on
// every run. Where that is no document (a single file of prose, or a few documents), validation
// is instead the tail of the tokens: the last floor(N f) of all N, training the ones before, so
// no token is in both.
//
// Shards. tokenize_documents encodes each document followed by its separator line, so a shard
// decodes to the text it came from. A shard file is little-endian:
//   "WEFTTOK\0"  u32 version (1)  u32 token width in bytes (2: u16)  u32 vocab size
//   u32 identity length L  u64 token count N  L bytes of tokenizer identity  N u16 tokens
// It is written atomically; read_token_shard checks every field (the identity is printable
// ASCII), the exact file size and that every token is below the vocabulary size, and names the
// file in each FormatError.
//
// TokenDataset. Sample k is the window of `context` tokens starting at token k * stride, whose
// targets are the same window shifted one token on; with stride 1 every start is a sample (draw
// them with ReplacementSampler for random windows), with stride = context the samples tile the
// shard without overlap (an evaluation pass with SequentialSampler).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "weft/data/dataset.h"
#include "weft/data/tokenizer.h"

namespace weft::data {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The documents of one file, in order.
std::vector<std::string> read_text_documents(const std::string& path, const std::string& separator = "%");

// Paths named on a command line, in order: a file is itself, a directory stands for its regular
// files named *.txt or without an extension, sorted; other names are skipped (in the fortunes
// directory the .dat files are indexes and the .u8 names are symlinks to the text). A missing
// path or a directory with no such file → IOError saying what it holds instead.
std::vector<std::string> expand_text_paths(const std::vector<std::string>& paths);

struct DocumentSplit {
  std::vector<std::string> train;
  std::vector<std::string> val;
};
// val_fraction outside [0, 1) → ValueError.
DocumentSplit split_documents(const std::vector<std::string>& documents, double val_fraction);

struct TokenShard {
  std::string tokenizer;  // the identity of the tokenizer that made it
  int64_t vocab_size = 0;
  std::vector<uint16_t> tokens;
  std::string path;  // the file it was read from, for messages; empty when made in memory
};

// A tokenizer whose vocabulary does not fit u16 → ValueError.
TokenShard tokenize_documents(const std::vector<std::string>& documents, const Tokenizer& tokenizer,
                              const std::string& separator = "%");
struct ShardSplit {
  TokenShard train, val;
  bool by_tokens = false;  // the tail of the tokens rather than whole documents went to validation
};
// The documents split (see Split above) and tokenized. val_fraction outside [0, 1) → ValueError.
ShardSplit tokenize_split(const std::vector<std::string>& documents, double val_fraction, const Tokenizer& tokenizer,
                          const std::string& separator = "%");
// The last floor(N val_fraction) tokens for validation, the tokens before them for training.
ShardSplit split_token_tail(const TokenShard& shard, double val_fraction);

void write_token_shard(const std::string& path, const TokenShard& shard);
TokenShard read_token_shard(const std::string& path);
// Whether a --data path names token shards: a .bin file, or a directory holding train.bin.
bool is_token_shard_path(const std::string& path);
// A shard made by another tokenizer → ValueError naming both identities.
void check_shard_tokenizer(const TokenShard& shard, const Tokenizer& tokenizer);

class TokenDataset : public Dataset {
 public:
  // context < 1, stride < 1 or a shard shorter than context + 1 tokens → ValueError.
  TokenDataset(TokenShard shard, int64_t context, int64_t stride = 1);
  int64_t size() const override;
  // inputs i64 [B, context], targets i64 [B, context].
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const TokenShard& shard() const { return shard_; }
  int64_t context() const { return context_; }

 private:
  TokenShard shard_;
  int64_t context_;
  int64_t stride_;
};

}  // namespace weft::data
