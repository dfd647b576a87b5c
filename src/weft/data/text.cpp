#include "weft/data/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "weft/core/error.h"
#include "weft/io/atomic_file.h"

namespace weft::data {
namespace {

constexpr char kShardMagic[8] = {'W', 'E', 'F', 'T', 'T', 'O', 'K', '\0'};
constexpr uint32_t kShardVersion = 1;
constexpr uint32_t kTokenBytes = 2;
constexpr size_t kShardHeaderBytes = 8 + 4 + 4 + 4 + 4 + 8;
constexpr const char* kReencode = " (re-encode the text with weft tokenize encode)";
constexpr int64_t kMaxShardVocab = int64_t{std::numeric_limits<uint16_t>::max()} + 1;

// Length of the valid UTF-8 sequence at text[i], or 0 if none starts there (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF).
size_t utf8_sequence_length(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b = byte(i);
  if (b < 0x80) return 1;
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) length = 2;
  else if (b >= 0xE0 && b <= 0xEF) length = 3, low = b == 0xE0 ? 0xA0 : 0x80, high = b == 0xED ? 0x9F : 0xBF;
  else if (b >= 0xF0 && b <= 0xF4) length = 4, low = b == 0xF0 ? 0x90 : 0x80, high = b == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return length;
}

void check_utf8(std::string_view text, const std::string& path) {
  for (size_t i = 0; i < text.size();) {
    size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(text[i]));
      int64_t line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(i), '\n');
      throw FormatError(str("'", path, "': expected UTF-8 text, found an invalid byte ", hex, " at byte offset ", i,
                            " (line ", line, "); convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"));
    }
    i += length;
  }
}

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

uint64_t read_le(const std::string& in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return value;
}

}  // namespace

std::vector<std::string> read_text_documents(const std::string& path, const std::string& separator) {
  std::string text = io::read_file(path);
  WEFT_CHECK(!text.empty(), FormatError, "'", path,
             "' is empty: expected UTF-8 text (leave the file out, or write text in it)");
  check_utf8(text, path);
  std::vector<std::string> documents;
  std::string current;
  auto finish = [&] {
    if (current.empty()) return;
    if (current.back() != '\n') current.push_back('\n');
    documents.push_back(std::move(current));
    current.clear();
  };
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    std::string_view line(text.data() + start, end - start);
    std::string_view content = line.substr(0, line.size() - (line.back() == '\n'));
    if (content == separator) finish();
    else current.append(line);
    start = end;
  }
  finish();
  WEFT_CHECK(!documents.empty(), FormatError, "'", path, "' holds no text: expected at least one document, found only '",
             separator, "' separator lines (leave the file out, or write text in it)");
  return documents;
}

std::vector<std::string> expand_text_paths(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    fs::file_status status = fs::status(path, ec);
    WEFT_CHECK(fs::exists(status), IOError, "cannot find text '", path, "'",
               path == kFortunesDir ? " (the default corpus: install the fortunes package, scripts/setup)"
                                    : ": name a text file, a directory of *.txt files, or shards of weft tokenize "
                                      "encode");
    if (!fs::is_directory(status)) {
      files.push_back(path);
      continue;
    }
    std::vector<std::string> texts, others;
    fs::directory_iterator entries(path, ec);
    WEFT_CHECK(!ec, IOError, "cannot list directory '", path, "': ", ec.message());
    for (const fs::directory_entry& entry : entries) {
      const fs::path& name = entry.path();
      bool text =
          entry.is_regular_file() && !entry.is_symlink() && (!name.has_extension() || name.extension() == ".txt");
      (text ? texts : others).push_back(name.filename().string());
    }
    std::sort(others.begin(), others.end());
    std::string found;
    for (size_t i = 0; i < std::min<size_t>(others.size(), 3); ++i) found += str(i ? ", " : "", others[i]);
    if (others.size() > 3) found += str(" and ", others.size() - 3, " more");
    WEFT_CHECK(!texts.empty(), IOError, "'", path,
               "': expected text files (*.txt, or names without an extension), found ",
               others.empty() ? "an empty directory" : str("only ", found),
               "; put the text in *.txt files there, or name a file itself");
    for (std::string& text : texts) text = (fs::path(path) / text).string();
    std::sort(texts.begin(), texts.end());
    files.insert(files.end(), texts.begin(), texts.end());
  }
  return files;
}

DocumentSplit split_documents(const std::vector<std::string>& documents, double val_fraction) {
  WEFT_CHECK(val_fraction >= 0 && val_fraction < 1, ValueError,
             "split_documents: expected a validation fraction in [0, 1), found ", val_fraction);
  DocumentSplit split;
  for (size_t i = 0; i < documents.size(); ++i) {
    bool val = std::floor(static_cast<double>(i + 1) * val_fraction) > std::floor(static_cast<double>(i) * val_fraction);
    (val ? split.val : split.train).push_back(documents[i]);
  }
  return split;
}

ShardSplit tokenize_split(const std::vector<std::string>& documents, double val_fraction, const Tokenizer& tokenizer,
                          const std::string& separator) {
  DocumentSplit split = split_documents(documents, val_fraction);
  if (val_fraction == 0 || !split.val.empty())
    return {tokenize_documents(split.train, tokenizer, separator), tokenize_documents(split.val, tokenizer, separator)};
  return split_token_tail(tokenize_documents(documents, tokenizer, separator), val_fraction);
}

ShardSplit split_token_tail(const TokenShard& shard, double val_fraction) {
  WEFT_CHECK(val_fraction >= 0 && val_fraction < 1, ValueError,
             "split_token_tail: expected a validation fraction in [0, 1), found ", val_fraction);
  const auto val_tokens = static_cast<size_t>(std::floor(static_cast<double>(shard.tokens.size()) * val_fraction));
  const auto cut = shard.tokens.end() - static_cast<std::ptrdiff_t>(val_tokens);
  return {{shard.tokenizer, shard.vocab_size, {shard.tokens.begin(), cut}, shard.path},
          {shard.tokenizer, shard.vocab_size, {cut, shard.tokens.end()}, shard.path}, true};
}

TokenShard tokenize_documents(const std::vector<std::string>& documents, const Tokenizer& tokenizer,
                              const std::string& separator) {
  WEFT_CHECK(tokenizer.vocab_size() <= kMaxShardVocab, ValueError, "tokenize_documents: shards store u16 tokens, ",
             "so the vocabulary must have at most ", kMaxShardVocab, " entries; tokenizer ", tokenizer.identity(),
             " has ", tokenizer.vocab_size());
  TokenShard shard{tokenizer.identity(), tokenizer.vocab_size(), {}, {}};
  std::vector<int32_t> separator_ids = tokenizer.encode(separator + "\n");
  auto append = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids) shard.tokens.push_back(static_cast<uint16_t>(id));
  };
  for (const std::string& document : documents) {
    append(tokenizer.encode(document));
    append(separator_ids);
  }
  return shard;
}

void write_token_shard(const std::string& path, const TokenShard& shard) {
  WEFT_CHECK(shard.vocab_size >= 1 && shard.vocab_size <= kMaxShardVocab, ValueError, "write_token_shard: '", path,
             "': expected a vocabulary of 1 to ", kMaxShardVocab, " entries, found ", shard.vocab_size);
  std::string bytes(kShardMagic, sizeof kShardMagic);
  append_le(bytes, kShardVersion, 4);
  append_le(bytes, kTokenBytes, 4);
  append_le(bytes, static_cast<uint64_t>(shard.vocab_size), 4);
  append_le(bytes, shard.tokenizer.size(), 4);
  append_le(bytes, shard.tokens.size(), 8);
  bytes += shard.tokenizer;
  bytes.reserve(bytes.size() + kTokenBytes * shard.tokens.size());
  for (uint16_t token : shard.tokens) append_le(bytes, token, kTokenBytes);
  io::write_file_atomic(path, [&](std::FILE* f) { std::fwrite(bytes.data(), 1, bytes.size(), f); });
}

TokenShard read_token_shard(const std::string& path) {
  std::string bytes = io::read_file(path);
  WEFT_CHECK(bytes.size() >= kShardHeaderBytes, FormatError, "'", path, "': truncated token shard: expected a ",
             kShardHeaderBytes, "-byte header, found ", bytes.size(), " bytes", kReencode);
  WEFT_CHECK(std::memcmp(bytes.data(), kShardMagic, sizeof kShardMagic) == 0, FormatError, "'", path,
             "' is not a weft token shard: expected magic \"WEFTTOK\", found other bytes (make shards with weft "
             "tokenize encode)");
  uint64_t version = read_le(bytes, 8, 4), width = read_le(bytes, 12, 4), vocab = read_le(bytes, 16, 4);
  uint64_t identity_bytes = read_le(bytes, 20, 4), count = read_le(bytes, 24, 8);
  WEFT_CHECK(version == kShardVersion, FormatError, "'", path, "': expected token shard version ", kShardVersion,
             ", found ", version, " (written by another weft version? re-encode the text)");
  WEFT_CHECK(width == kTokenBytes, FormatError, "'", path, "': expected ", kTokenBytes, "-byte (u16) tokens, found ",
             width, "-byte");
  WEFT_CHECK(vocab >= 1 && vocab <= kMaxShardVocab, FormatError, "'", path, "': expected a vocabulary of 1 to ",
             kMaxShardVocab, " entries, found ", vocab);
  uint64_t after_header = bytes.size() - kShardHeaderBytes;
  WEFT_CHECK(identity_bytes <= after_header, FormatError, "'", path, "': truncated token shard: the header names a ",
             identity_bytes, "-byte tokenizer identity, but only ", after_header, " bytes follow it", kReencode);
  uint64_t token_bytes = after_header - identity_bytes;
  WEFT_CHECK(count <= token_bytes / kTokenBytes, FormatError, "'", path, "': truncated token shard: the header says ",
             count, " tokens, the file holds ", token_bytes / kTokenBytes, kReencode);
  WEFT_CHECK(token_bytes == count * kTokenBytes, FormatError, "'", path, "': expected the file to end after its ",
             count, " tokens, found ", token_bytes - count * kTokenBytes, " trailing bytes", kReencode);
  TokenShard shard{bytes.substr(kShardHeaderBytes, identity_bytes), static_cast<int64_t>(vocab), {}, path};
  WEFT_CHECK(!shard.tokenizer.empty(), FormatError, "'", path, "': expected a tokenizer identity, found none");
  // The identity goes into messages, so it must not carry control bytes or line breaks.
  auto unprintable = std::find_if(shard.tokenizer.begin(), shard.tokenizer.end(), [](char c) { return c < 0x21 || c > 0x7e; });
  WEFT_CHECK(unprintable == shard.tokenizer.end(), FormatError, "'", path, "': expected a tokenizer identity of ",
             "printable ASCII (\"byte\", \"sentencepiece:...\"), found byte ", static_cast<int>(static_cast<unsigned char>(*unprintable)),
             " at offset ", unprintable - shard.tokenizer.begin(), " of it (corrupt shard)");
  shard.tokens.resize(count);
  size_t at = kShardHeaderBytes + identity_bytes;
  for (uint64_t i = 0; i < count; ++i, at += kTokenBytes) {
    auto token = static_cast<uint16_t>(read_le(bytes, at, kTokenBytes));
    WEFT_CHECK(token < vocab, FormatError, "'", path, "': token id ", token, " at position ", i,
               " is outside the vocabulary [0, ", vocab, ") of tokenizer ", shard.tokenizer, ": a corrupt shard",
               kReencode);
    shard.tokens[i] = token;
  }
  return shard;
}

bool is_token_shard_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return path.ends_with(".bin") || (fs::is_directory(path, ec) && fs::exists(fs::path(path) / "train.bin", ec));
}

void check_shard_tokenizer(const TokenShard& shard, const Tokenizer& tokenizer) {
  WEFT_CHECK(shard.tokenizer == tokenizer.identity() && shard.vocab_size == tokenizer.vocab_size(), ValueError, "'",
             shard.path.empty() ? "token shard" : shard.path, "' was made by tokenizer ", shard.tokenizer, " (vocab ",
             shard.vocab_size, "), not by the given ", tokenizer.identity(), " (vocab ", tokenizer.vocab_size(),
             "): pass the tokenizer it was made with (--tokenizer), or re-encode the text with this one (weft "
             "tokenize encode)");
}

TokenDataset::TokenDataset(TokenShard shard, int64_t context, int64_t stride)
    : shard_(std::move(shard)), context_(context), stride_(stride) {
  WEFT_CHECK(context >= 1 && stride >= 1, ValueError, "TokenDataset: expected context >= 1 and stride >= 1, found ",
             context, " and ", stride);
  auto tokens = static_cast<int64_t>(shard_.tokens.size());
  WEFT_CHECK(tokens >= context + 1, ValueError, "TokenDataset: a window of ", context, " tokens needs ", context + 1,
             " tokens (inputs and the next-token targets), found ", tokens, " in '",
             shard_.path.empty() ? "token shard" : shard_.path, "'; use a shorter context or more text");
}

int64_t TokenDataset::size() const {
  return (static_cast<int64_t>(shard_.tokens.size()) - context_ - 1) / stride_ + 1;
}

Batch TokenDataset::get_batch(const std::vector<int64_t>& indices) const {
  auto batch = static_cast<int64_t>(indices.size());
  Batch out{Tensor::empty({batch, context_}, DType::i64), Tensor::empty({batch, context_}, DType::i64)};
  int64_t* inputs = out.inputs.data<int64_t>();
  int64_t* targets = out.targets.data<int64_t>();
  for (int64_t i = 0; i < batch; ++i) {
    int64_t k = indices[i];
    WEFT_CHECK(k >= 0 && k < size(), IndexError, "TokenDataset: index ", k, " is outside [0, ", size(), ")");
    const uint16_t* window = shard_.tokens.data() + k * stride_;
    std::copy(window, window + context_, inputs + i * context_);
    std::copy(window + 1, window + context_ + 1, targets + i * context_);
  }
  return out;
}

}  // namespace weft::data
