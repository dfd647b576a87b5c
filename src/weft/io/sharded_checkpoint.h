// A sharded checkpoint's files: each rank's runs of the flattened tensors in a safetensors file of
// its own, and an index that says where every run lies, so that no process ever has to hold a
// tensor whole to save it (ZeRO), and any number of processes can read it back.
//
//   shard-00001-of-00004.safetensors   rank 1's runs: "NAME", a 1-D run of tensor NAME flattened,
//                                      and its companions "NAME.FIELD" (the same run of another
//                                      tensor of NAME's shape, an optimizer's state) or 0-d values
//   shards.json                        {"ranks", "step", "id", "metadata", "checksums": [each
//                                      shard's weft.checksum, by rank], "tensors": {NAME:
//                                      {"shape", "dtype", "runs": [[rank, first element, length]]}}}
//
// A run may also be strided, [rank, first element, length, count, stride]: `count` blocks of
// `length` elements, each `stride` after the one before, held one after another in the rank's
// "NAME" (a tensor-parallel rank's columns of a matrix: a block in every row). A rank holds at most
// one run of a tensor.
//
// Every shard file carries the index's id in its metadata (weft.checkpoint), so shards of two
// saves cannot be mixed unnoticed, and its checksum (safetensors.h), which the index records too:
// a shard whose bytes changed, or that was replaced by another self-consistent file, is refused.
// Indexes written before checksums were have no "checksums"; their shards are read unchecked. io knows only files and tensors: which tensors a rank writes,
// and when, is dist's and train's (train/checkpoint.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
// Writes DIR/shards.json (atomically). `tensors` as the index holds them; `checksums` the one
// save_safetensors returned for each rank's shard.
void write_shard_index(const std::string& dir, int64_t step, const std::string& id,
                       const std::map<std::string, std::string>& metadata, const std::vector<std::string>& checksums,
                       const nlohmann::json& tensors);

// The header the merged file would have: the index's metadata, and each tensor's name, dtype and
// shape (no byte ranges). Reads the index alone.
SafetensorsHeader sharded_header(const std::string& dir);

// The tensors put together from every rank's runs. Refused naming the file: missing shard files
// (IOError); shards of another save or step, a shard whose checksum is not its bytes' or not the index's,
// an index with no tensors, a dtype that is not a dtype or not the shard's, a tensor the index
// lists and a shard lacks or a shard holds and the index does not list, runs that leave a tensor
// incomplete or overlap, a malformed index (FormatError).
struct MergedShards {
  std::vector<std::pair<std::string, Tensor>> tensors;  // NAME -> the whole tensor, in index order
  std::map<std::string, Tensor> companions;             // NAME.FIELD -> whole (or the 0-d value)
  std::map<std::string, std::string> metadata;
  int64_t step = 0;
};
MergedShards merge_shards(const std::string& dir);

}  // namespace weft::io
