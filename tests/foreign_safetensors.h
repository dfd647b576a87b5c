// safetensors files made or changed by hand rather than by weft's writer: as PyTorch's writer lays
// them out, or with their header edited (a retyped tensor, a checksum taken out).
#pragma once
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/nn/module.h"

namespace weft::testing {

// PyTorch's layout: keys sorted, {"format": "pt"} the only metadata, the data packed in key order.
// `state` with every tensor converted to `dtype`, whose safetensors code is `code` ("F64").
inline void save_foreign_safetensors(const std::string& file, const nn::StateDict& state, DType dtype,
                                     const std::string& code) {
  std::map<std::string, Tensor> sorted(state.begin(), state.end());
  nlohmann::ordered_json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const auto& [name, t] : sorted) {
    const Tensor converted = t.to(dtype).contiguous();
    header[name] = {{"dtype", code}, {"shape", t.shape()}, {"data_offsets", {data.size(), data.size() + converted.nbytes()}}};
    data.append(static_cast<const char*>(converted.data_ptr()), converted.nbytes());
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), sizeof length);
  out << text << data;
}

// Rewrites `file`'s header JSON through `edit`, keeping its data section byte for byte.
inline void edit_safetensors_header(const std::string& file, const std::function<void(nlohmann::ordered_json&)>& edit) {
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t length;
  std::memcpy(&length, bytes.data(), sizeof length);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, length));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t new_length = text.size();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&new_length), sizeof new_length);
  out << text << bytes.substr(8 + length);
}

// Flips every bit of the byte at `offset` from the end of `file`.
inline void flip_byte_from_end(const std::string& file, int64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-offset, std::ios::end);
  const char byte = static_cast<char>(~f.get());
  f.seekp(-offset, std::ios::end);
  f.put(byte);
}

}  // namespace weft::testing
