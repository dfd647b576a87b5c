// safetensors: Hugging Face's checkpoint format (https://github.com/huggingface/safetensors),
// which PyTorch, JAX and the Hub read, so weights weft saves load anywhere and the reverse.
//
//   8 bytes   N, the header length, u64 little-endian
//   N bytes   JSON object: {"__metadata__": {"k": "v", ...},            (optional, strings only)
//                           "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//             padded with spaces so that 8 + N is a multiple of 8
//   the rest  the data section: every tensor's bytes, row-major, little-endian, packed
//
// Invariants of a file this layer accepts (FormatError naming the file and the fault otherwise;
// IOError when it cannot be opened): the header is a JSON object starting with '{', without
// duplicate keys; every dtype is one weft has (F64 F32 F16 BF16 I64 I32 I8 U8 BOOL); shapes are
// non-negative; end - begin == numel * element size; sorted by offset, the tensors tile the data
// section exactly, with no overlap, no gap and nothing after the last (the reference reader's
// rule, which keeps a file from hiding a second file inside it); BOOL bytes are 0 or 1. Files are
// checked whole before any tensor is built, so a load either returns everything or throws.
//
// Checksums: weft's writer records one in the metadata, "weft.checksum": "xxh3-64:<16 hex digits>",
// XXH3's 64-bit hash of what the file says (every tensor's name, dtype, shape and byte range, and
// the other metadata, in a form of weft's own) and then of the data section. A load verifies it,
// one pass over the bytes, and refuses a file whose bytes no longer hash to it (FormatError naming
// the file): a flipped bit, a tensor retyped I32 for F32 (the same size), an edited value. Files
// without the key (other writers', weft's before it wrote one) load unchecked.
//
// Loading is zero-copy: the file is mmap'd copy-on-write and each tensor borrows its bytes from
// the mapping, which is unmapped when the last such tensor dies. Writing to a loaded tensor
// changes only this process's copy of that page, never the file. (A tensor whose bytes are not
// aligned to its element size, which other writers can produce, is copied instead.) Truncating a
// file while its tensors are alive is undefined, as for any mmap: weft's own writer never does
// that, because it replaces files by rename (atomic_file.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/tensor.h"

namespace weft::io {

// Writes atomically (a crash leaves the old file or the new, never a torn one). The header lists
// the tensors in the given order; the data section holds them largest element size first (the
// reference writer's layout), so that each starts aligned and loads in place. Non-contiguous
// tensors are written as their row-major values. Names must be unique, non-empty and not
// "__metadata__" (ValueError otherwise). Records the checksum, replacing any weft.checksum in
// `metadata`, and returns it.
inline constexpr const char* kChecksumKey = "weft.checksum";
std::string save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in header order: the order they were saved in
  std::map<std::string, std::string> metadata;
};
SafetensorsFile load_safetensors(const std::string& path);

// What a file holds, without touching its data section (for listing a checkpoint).
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in header order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data section: 8 + header length
};
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace weft::io
