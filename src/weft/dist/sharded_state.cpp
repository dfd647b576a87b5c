#include "weft/dist/sharded_state.h"

#include <algorithm>

#include "weft/autograd/grad_mode.h"

namespace weft::dist {

TensorPart whole_part(const Shape& shape, DType dtype) {
  const int64_t n = numel(shape);
  return {.whole = shape, .dtype = dtype, .run = {.begin = 0, .length = n, .count = 1, .stride = n}, .local = shape};
}

void gather_shard_layout(CheckpointShard& shard, ProcessGroup& group) {
  nlohmann::json mine = nlohmann::json::object();
  for (const auto& [name, part] : shard.parts) {
    const Slice& s = part.run;
    mine[name] = {{"shape", part.whole}, {"dtype", dtype_name(part.dtype)},
                  {"run", s.count == 1 ? nlohmann::json{s.begin, s.length} : nlohmann::json{s.begin, s.length, s.count, s.stride}}};
  }
  // Each rank's description as text, padded to the longest: all_gather moves equal sizes.
  const std::string text = mine.dump();
  Tensor length = Tensor::scalar(static_cast<double>(text.size()), DType::i64).reshape({1});
  Tensor lengths = Tensor::empty({group.size()}, DType::i64);
  group.all_gather(length, lengths);
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  Tensor own = Tensor::zeros({longest}, DType::u8), all = Tensor::empty({group.size() * longest}, DType::u8);
  std::copy(text.begin(), text.end(), own.data<uint8_t>());
  group.all_gather(own, all);
  shard.layout = nlohmann::json::object();
  for (int r = 0; r < group.size(); ++r) {
    const char* begin = reinterpret_cast<const char*>(all.data<uint8_t>()) + r * longest;
    const nlohmann::json parts = nlohmann::json::parse(begin, begin + sizes[static_cast<size_t>(r)]);
    for (const auto& [name, part] : parts.items()) {
      nlohmann::json& entry = shard.layout[name];
      if (entry.is_null()) entry = {{"shape", part["shape"]}, {"dtype", part["dtype"]}, {"runs", nlohmann::json::array()}};
      nlohmann::json run = {r};
      for (const nlohmann::json& value : part["run"]) run.push_back(value);
      entry["runs"].push_back(run);
    }
  }
}

std::map<std::string, Tensor> take_parts(const std::map<std::string, Tensor>& whole,
                                         const std::map<std::string, TensorPart>& held) {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> out;
  for (const auto& [key, tensor] : whole) {
    // NAME itself, or an optimizer's NAME.FIELD of NAME's shape.
    auto it = held.find(key);
    if (it == held.end() && key.rfind('.') != std::string::npos) it = held.find(key.substr(0, key.rfind('.')));
    if (it == held.end()) continue;
    if (tensor.dim() == 0) {
      out[key] = tensor;
      continue;
    }
    const TensorPart& part = it->second;
    WEFT_CHECK(tensor.shape() == part.whole, ShapeError, "'", key, "' is ", shape_str(tensor.shape()),
               ", the whole model's is ", shape_str(part.whole));
    out[key] = part.local == part.whole ? tensor : take_slice(tensor, part.run).view(part.local);
  }
  return out;
}

}  // namespace weft::dist
