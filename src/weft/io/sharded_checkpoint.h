// A sharded checkpoint's files: each rank's runs of the flattened tensors in a safetensors file of
// its own, and an index that says where every run lies, so that no process ever has to hold a
// tensor whole to save it (ZeRO), and any number of processes can read it back.
//
//   shard-00001-of-00004.safetensors   rank 1's runs: "NAME", a 1-D run of tensor NAME flattened,
//                                      and its companions "NAME.FIELD" (the same run of another
//                                      tensor of NAME's shape, an optimizer's state) or 0-d values
//   shards.json                        {"ranks", "step", "id", "metadata", "tensors": {NAME:
//                                      {"shape", "dtype", "runs": [[rank, first element, length]]}}}
//
// A run may also be strided, [rank, first element, length, count, stride]: `count` blocks of
// `length` elements, each `stride` after the one before, held one after another in the rank's
// "NAME" (a tensor-parallel rank's columns of a matrix: a block in every row). A rank holds at most
// one run of a tensor.
//
// Every shard file carries the index's id in its metadata (weft.checkpoint), so shards of two
// saves cannot be mixed unnoticed. io knows only files and tensors: which tensors a rank writes,
// and when, is dist's and train's (train/checkpoint.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/core/tensor.h"
#include "weft/io/safetensors.h"

namespace weft::io {

inline constexpr const char* kShardIndex = "shards.json";
inline constexpr const char* kShardCheckpointId = "weft.checkpoint";

std::string shard_file(const std::string& dir, int64_t rank, int64_t ranks);
bool is_sharded_checkpoint(const std::string& dir);  // whether DIR/shards.json exists
// Where weft suggests merging DIR's shards: DIR.safetensors, beside the directory ("runs/z/" ->
// "runs/z.safetensors").
std::string consolidated_file(const std::string& dir);
// The command that merges DIR's shards into consolidated_file(DIR), as weft prints it to be
// pasted; with --overwrite when that file exists, as it then holds an earlier checkpoint's merge.
std::string consolidate_command(const std::string& dir);
// Writes DIR/shards.json (atomically). `tensors` as the index holds them.
void write_shard_index(const std::string& dir, int64_t ranks, int64_t step, const std::string& id,
                       const std::map<std::string, std::string>& metadata, const nlohmann::json& tensors);

// The header the merged file would have: the index's metadata, and each tensor's name, dtype and
// shape (no byte ranges). Reads the index alone.
SafetensorsHeader sharded_header(const std::string& dir);

// The tensors put together from every rank's runs. Missing shard files (IOError), shards of
// another save, runs that leave a tensor incomplete or a malformed index (FormatError) are
// refused naming the file.
struct MergedShards {
  std::vector<std::pair<std::string, Tensor>> tensors;  // NAME -> the whole tensor, in index order
  std::map<std::string, Tensor> companions;             // NAME.FIELD -> whole (or the 0-d value)
  std::map<std::string, std::string> metadata;
  int64_t step = 0;
};
MergedShards merge_shards(const std::string& dir);

}  // namespace weft::io
