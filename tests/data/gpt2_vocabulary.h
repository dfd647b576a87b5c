// Byte-level BPE files for tests: GPT-2's byte alphabet, written out here from OpenAI's
// encoder.py (bytes_to_unicode) rather than taken from weft, and vocab.json / merges.txt of the
// 256 byte tokens (id = byte value) followed by the results of `merges` in rank order.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::testing {

inline bool printable_byte(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

// A byte as vocab.json writes it: itself when printable, else 256 + its rank among the others.
inline std::string written(unsigned char byte) {
  int code = byte;
  if (!printable_byte(byte)) {
    code = 256;
    for (int b = 0; b < byte; ++b) code += !printable_byte(b);
  }
  std::string utf8;
  if (code < 0x80) {
    utf8 += static_cast<char>(code);
  } else {
    utf8 += static_cast<char>(0xC0 | (code >> 6));
    utf8 += static_cast<char>(0x80 | (code & 0x3F));
  }
  return utf8;
}

inline std::string written(const std::string& bytes) {
  std::string text;
  for (unsigned char b : bytes) text += written(b);
  return text;
}

using Merges = std::vector<std::pair<std::string, std::string>>;  // raw bytes, by rank

// `extra` tokens (special ones, "<|endoftext|>") follow the merges.
inline std::string vocab_json(const Merges& merges, const std::vector<std::string>& extra = {}) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[written(static_cast<unsigned char>(b))] = b;
  int id = 256;
  for (const auto& [a, b] : merges) vocab[written(a + b)] = id++;
  for (const std::string& token : extra) vocab[token] = id++;
  return vocab.dump();
}

inline std::string merges_txt(const Merges& merges, bool version_line = true) {
  std::string text = version_line ? "#version: 0.2\n" : "";
  for (const auto& [a, b] : merges) text += written(a) + " " + written(b) + "\n";
  return text;
}

}  // namespace weft::testing
