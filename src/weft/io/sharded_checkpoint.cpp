#include "weft/io/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "weft/core/program.h"
#include "weft/io/atomic_file.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"

namespace weft::io {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxShardIndexBytes = 256 << 20;

// array[i], an integer in [min, max].
int64_t element_integer(const nlohmann::json& array, size_t i, const std::string& where, int64_t min, int64_t max) {
  const nlohmann::json& v = array.at(i);
  WEFT_CHECK(v.is_number_integer() && v.get<int64_t>() >= min && v.get<int64_t>() <= max, FormatError, where,
             ": expected a whole number from ", min, " to ", max, ", found ", json_excerpt(v));
  return v.get<int64_t>();
}

nlohmann::json read_index(const std::string& index_path) {
  nlohmann::json index = parse_json(read_input(index_path, kMaxShardIndexBytes), index_path);
  WEFT_CHECK(index.is_object(), FormatError, index_path, ": expected a JSON object, found ", json_excerpt(index));
  return index;
}

std::map<std::string, std::string> index_metadata(const nlohmann::json& index, const std::string& index_path) {
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : json_field(index, "metadata", index_path).items()) {
    WEFT_CHECK(value.is_string(), FormatError, index_path, ": metadata \"", key, "\" must be a string");
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

Shape entry_shape(const nlohmann::json& entry, const std::string& where) {
  const nlohmann::json& shape_json = json_field(entry, "shape", where);
  WEFT_CHECK(shape_json.is_array(), FormatError, where, ": \"shape\" must be an array");
  Shape shape;
  // As the safetensors reader: the product of max(size, 1) bounds numel and every stride, so it is
  // checked once here, not found wrapped later by whatever reads the shape.
  int64_t extent = 1;
  for (size_t d = 0; d < shape_json.size(); ++d) {
    shape.push_back(element_integer(shape_json, d, where, 0, int64_t{1} << 40));
    WEFT_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(shape.back(), 1), &extent) && extent <= int64_t{1} << 40,
               FormatError, where, ": \"shape\" ", json_excerpt(shape_json), " has more than 2^40 elements");
  }
  return shape;
}

const nlohmann::json& index_tensors(const nlohmann::json& index, const std::string& index_path) {
  const nlohmann::json& tensors = json_field(index, "tensors", index_path);
  WEFT_CHECK(tensors.is_object(), FormatError, index_path, ": \"tensors\" must be an object");
  WEFT_CHECK(!tensors.empty(), FormatError, index_path, ": \"tensors\" is empty; a checkpoint holds its model's "
             "tensors");
  return tensors;
}

DType entry_dtype(const nlohmann::json& entry, const std::string& where) {
  const std::string name = json_string(entry, "dtype", where);
  try {
    return dtype_from_name(name);
  } catch (const DTypeError& e) {
    throw FormatError(str(where, ": \"dtype\" ", e.what()));
  }
}

// The checksum the index records for each rank's shard; empty for an index written before them.
std::vector<std::string> index_checksums(const nlohmann::json& index, const std::string& index_path, int64_t ranks) {
  if (!index.contains("checksums")) return {};
  const nlohmann::json& checksums = index["checksums"];
  WEFT_CHECK(checksums.is_array() && std::ssize(checksums) == ranks &&
                 std::all_of(checksums.begin(), checksums.end(), [](const nlohmann::json& c) { return c.is_string(); }),
             FormatError, index_path, ": \"checksums\" must hold a string for each of its ", ranks, " ranks, found ",
             json_excerpt(checksums));
  return checksums.get<std::vector<std::string>>();
}

}  // namespace

std::string shard_file(const std::string& dir, int64_t rank, int64_t ranks) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05lld-of-%05lld.safetensors", static_cast<long long>(rank),
                static_cast<long long>(ranks));
  return (fs::path(dir) / name).string();
}

std::string consolidated_file(const std::string& dir) {
  fs::path path = fs::path(dir).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  return path.string() + ".safetensors";
}

std::string consolidate_command(const std::string& dir) {
  const std::string merged = consolidated_file(dir);
  std::error_code error;
  return str(shell_quote(program_name()), " ckpt consolidate ", shell_quote(dir), " --out ", shell_quote(merged),
             fs::exists(merged, error) ? " --overwrite" : "");
}

bool is_sharded_checkpoint(const std::string& dir) {
  std::error_code error;
  return fs::exists(fs::path(dir) / kShardIndex, error);
}

void write_shard_index(const std::string& dir, int64_t step, const std::string& id,
                       const std::map<std::string, std::string>& metadata, const std::vector<std::string>& checksums,
                       const nlohmann::json& tensors) {
  const nlohmann::json index = {{"ranks", checksums.size()}, {"step", step}, {"id", id}, {"metadata", metadata},
                                {"checksums", checksums}, {"tensors", tensors}};
  const std::string text = index.dump(1) + "\n";
  write_file_atomic((fs::path(dir) / kShardIndex).string(),
                    [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
}

SafetensorsHeader sharded_header(const std::string& dir) {
  const std::string index_path = (fs::path(dir) / kShardIndex).string();
  const nlohmann::json index = read_index(index_path);
  SafetensorsHeader header;
  header.metadata = index_metadata(index, index_path);
  for (const auto& [name, entry] : index_tensors(index, index_path).items()) {
    const std::string where = str(index_path, ": ", name);
    header.tensors.push_back({.name = name, .dtype = entry_dtype(entry, where), .shape = entry_shape(entry, where)});
  }
  return header;
}

MergedShards merge_shards(const std::string& files) {
  const std::string index_path = (fs::path(files) / kShardIndex).string();
  const nlohmann::json index = read_index(index_path);
  const int64_t ranks = json_integer(index, "ranks", index_path, 1, 1 << 20);
  const std::string id = json_string(index, "id", index_path);
  MergedShards out;
  out.step = json_integer(index, "step", index_path, 0);
  out.metadata = index_metadata(index, index_path);
  const nlohmann::json& tensors = index_tensors(index, index_path);
  const std::vector<std::string> checksums = index_checksums(index, index_path, ranks);
  std::vector<std::map<std::string, Tensor>> shards;
  for (int64_t r = 0; r < ranks; ++r) {
    const std::string path = shard_file(files, r, ranks);
    WEFT_CHECK(fs::exists(path), IOError, "checkpoint ", files, " is missing the shard of rank ", r, " of ", ranks,
               ": ", path, " does not exist");
    SafetensorsFile file = load_safetensors(path);  // which verifies the shard's bytes against its checksum
    auto it = file.metadata.find(kShardCheckpointId);
    WEFT_CHECK(it != file.metadata.end() && it->second == id, FormatError, path, " belongs to another checkpoint ",
               "than ", index_path, " (", kShardCheckpointId, " '", it == file.metadata.end() ? "" : it->second,
               "', the index says '", id, "'): shards of two saves were mixed");
    auto saved_at = file.metadata.find("weft.step");
    WEFT_CHECK(saved_at == file.metadata.end() || saved_at->second == std::to_string(out.step), FormatError, path,
               " was saved at step ", saved_at->second, ", ", index_path, " at step ", out.step);
    if (!checksums.empty()) {
      auto checksum = file.metadata.find(kChecksumKey);
      const std::string found = checksum == file.metadata.end() ? "none" : checksum->second;
      WEFT_CHECK(found == checksums[static_cast<size_t>(r)], FormatError, path, ": its checksum is ", found, ", but ",
                 index_path, " recorded ", checksums[static_cast<size_t>(r)], " for rank ", r,
                 "'s shard: the file was replaced since the checkpoint was saved");
    }
    for (const auto& [key, tensor] : file.tensors) {
      const size_t dot = key.rfind('.');
      WEFT_CHECK(tensors.contains(key) || (dot != std::string::npos && tensors.contains(key.substr(0, dot))),
                 FormatError, path, " holds '", key, "', which ", index_path, " does not list (neither a tensor of ",
                 "the model nor its optimizer state)");
    }
    shards.emplace_back(file.tensors.begin(), file.tensors.end());
  }
  for (const auto& item : tensors.items()) {
    // Named, not a structured binding: clang cannot capture those in the lambda below.
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    const std::string where = str(index_path, ": ", name);
    const Shape shape = entry_shape(entry, where);
    const DType dtype = entry_dtype(entry, where);
    const int64_t numel = weft::numel(shape);
    const nlohmann::json& runs = json_field(entry, "runs", where);
    WEFT_CHECK(runs.is_array() && !runs.empty(), FormatError, where, ": \"runs\" must be a non-empty array");
    // The tensor `key` (NAME or a companion) put together from the runs.
    auto assemble = [&](const std::string& key) {
      Tensor whole;
      int64_t covered = 0;
      std::vector<std::pair<int64_t, int64_t>> held;  // [first, end) of every block of every run
      for (const nlohmann::json& run : runs) {
        WEFT_CHECK(run.is_array() && (run.size() == 3 || run.size() == 5), FormatError, where,
                   ": a run is [rank, first element, length] or [rank, first element, length, count, stride]");
        const int64_t r = element_integer(run, 0, where, 0, ranks - 1);
        const int64_t begin = element_integer(run, 1, where, 0, numel), length = element_integer(run, 2, where, 1, numel - begin);
        const int64_t count = run.size() == 5 ? element_integer(run, 3, where, 1, numel) : 1;
        const int64_t stride = run.size() == 5 ? element_integer(run, 4, where, length, numel) : length;
        WEFT_CHECK(count - 1 <= (numel - begin - length) / stride, FormatError, where, ": a run of ", count,
                   " blocks every ", stride, " elements from ", begin, " overruns its ", numel, " elements");
        auto it = shards[static_cast<size_t>(r)].find(key);
        WEFT_CHECK(it != shards[static_cast<size_t>(r)].end(), FormatError, shard_file(files, r, ranks), " has no '",
                   key, "', which ", kShardIndex, " puts there");
        WEFT_CHECK(it->second.numel() == count * length, FormatError, shard_file(files, r, ranks), ": '", key, "' holds ",
                   it->second.numel(), " elements, the index says ", count * length);
        WEFT_CHECK(key != name || it->second.dtype() == dtype, FormatError, shard_file(files, r, ranks), ": '", key,
                   "' is ", dtype_name(it->second.dtype()), ", ", index_path, " says ", dtype_name(dtype));
        if (!whole.defined()) whole = Tensor::zeros({numel}, it->second.dtype());
        const Tensor blocks = it->second.reshape({count * length});
        for (int64_t i = 0; i < count; ++i)
          whole.narrow(0, begin + i * stride, length).copy_(blocks.narrow(0, i * length, length));
        covered += count * length;
        for (int64_t i = 0; i < count; ++i) held.emplace_back(begin + i * stride, begin + i * stride + length);
      }
      WEFT_CHECK(covered == numel, FormatError, where, ": the runs hold ", covered, " of its ", numel, " elements");
      // As many elements as the tensor has, none twice, is every element once.
      std::sort(held.begin(), held.end());
      for (size_t i = 1; i < held.size(); ++i)
        WEFT_CHECK(held[i].first >= held[i - 1].second, FormatError, where, ": two runs both hold elements ",
                   held[i].first, " to ", std::min(held[i].second, held[i - 1].second) - 1,
                   ", so others are in none");
      return whole.reshape(shape);
    };
    out.tensors.emplace_back(name, assemble(name));
    const std::map<std::string, Tensor>& first = shards[static_cast<size_t>(element_integer(runs[0], 0, where, 0, ranks - 1))];
    for (auto it = first.lower_bound(name + "."); it != first.end() && it->first.starts_with(name + "."); ++it) {
      const std::string field = it->first.substr(name.size() + 1);
      if (field.find('.') != std::string::npos) continue;  // another tensor's name, which this one prefixes
      out.companions[it->first] = it->second.dim() == 0 ? it->second : assemble(it->first);
    }
  }
  return out;
}

}  // namespace weft::io
