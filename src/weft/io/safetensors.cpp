#include "weft/io/safetensors.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "weft/core/error.h"
#include "weft/io/atomic_file.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"

namespace weft::io {

// Tensor bytes are written from, and mapped into, memory as they are.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kMetadataKey = "__metadata__";
// The reference reader's limit (MAX_HEADER_SIZE): a longer header is corruption or an attack on
// the JSON parser, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeCode {
  DType dtype;
  const char* code;
};
constexpr DTypeCode kDTypeCodes[] = {
    {DType::f64, "F64"}, {DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"}, {DType::i64, "I64"},
    {DType::i32, "I32"}, {DType::i8, "I8"},   {DType::u8, "U8"},   {DType::boolean, "BOOL"}};

const char* code_of(DType dtype) {
  for (const DTypeCode& c : kDTypeCodes)
    if (c.dtype == dtype) return c.code;
  throw DTypeError(str("safetensors: no code for dtype ", dtype_name(dtype)));
}

std::optional<DType> dtype_of_code(const std::string& code) {
  for (const DTypeCode& c : kDTypeCodes)
    if (code == c.code) return c.dtype;
  return std::nullopt;
}

std::string supported_codes() {
  std::string codes;
  for (const DTypeCode& c : kDTypeCodes) codes += (codes.empty() ? "" : " ") + std::string(c.code);
  return codes;
}

// A name as a JSON string literal: quoted, with control characters escaped, so an error message
// stays on one line whatever the file holds.
std::string quoted(const std::string& text) {
  return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
}

constexpr std::string_view kChecksumAlgorithm = "xxh3-64:";

// What the header says, in one unambiguous form (each string prefixed by its length), hashed: the
// seed of the checksum, whose JSON may be spaced or ordered otherwise by another writer.
uint64_t header_hash(const std::vector<TensorInfo>& tensors, const std::map<std::string, std::string>& metadata) {
  std::string text;
  auto add = [&](const std::string& s) { text += str(s.size(), ':', s, ' '); };
  for (const TensorInfo& t : tensors) {
    add(t.name);
    text += str(code_of(t.dtype), ' ', shape_str(t.shape), ' ', t.begin, ' ', t.end, '\n');
  }
  for (const auto& [key, value] : metadata) {
    if (key == kChecksumKey) continue;
    add(key);
    add(value);
  }
  return XXH3_64bits(text.data(), text.size());
}

std::string checksum_text(uint64_t hash) {
  char digits[17];
  std::snprintf(digits, sizeof digits, "%016llx", static_cast<unsigned long long>(hash));
  return str(kChecksumAlgorithm, digits);
}

}  // namespace

std::string save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    WEFT_CHECK(!name.empty(), ValueError, "save_safetensors ", path, ": a tensor has an empty name");
    WEFT_CHECK(name != kMetadataKey, ValueError, "save_safetensors ", path, ": \"", kMetadataKey,
               "\" is reserved for metadata and cannot name a tensor");
    WEFT_CHECK(names.insert(name).second, ValueError, "save_safetensors ", path, ": two tensors are named ",
               quoted(name), "; names must be unique");
    WEFT_CHECK(tensor.defined(), ValueError, "save_safetensors ", path, ": tensor ", quoted(name), " is undefined");
    WEFT_CHECK(tensor.device().is_cpu(), DeviceError, "save_safetensors ", path, ": tensor ", quoted(name), " is on ",
               tensor.device().name(), "; move it to the CPU first");
  }

  // Data goes largest element first (as the reference writer does): every tensor then starts at
  // a multiple of its element size, so a load can use all of them in place. The header keeps the
  // caller's order, which is the order a load returns.
  std::vector<size_t> data_order(tensors.size());
  std::iota(data_order.begin(), data_order.end(), size_t{0});
  std::stable_sort(data_order.begin(), data_order.end(), [&](size_t a, size_t b) {
    return tensors[a].second.element_size() > tensors[b].second.element_size();
  });
  std::vector<TensorInfo> infos(tensors.size());
  uint64_t offset = 0;
  for (size_t i : data_order) {
    const Tensor& tensor = tensors[i].second;
    infos[i] = {.name = tensors[i].first, .dtype = tensor.dtype(), .shape = tensor.shape(), .begin = offset,
                .end = offset + tensor.nbytes()};
    offset = infos[i].end;
  }

  std::map<std::string, std::string> recorded = metadata;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), XXH3_freeState);
  XXH3_64bits_reset_withSeed(hash.get(), header_hash(infos, recorded));
  for (size_t i : data_order) {
    const Tensor packed = tensors[i].second.contiguous_untracked();
    if (packed.nbytes() > 0) XXH3_64bits_update(hash.get(), packed.data_ptr(), packed.nbytes());
  }
  const std::string checksum = checksum_text(XXH3_64bits_digest(hash.get()));
  recorded[kChecksumKey] = checksum;

  Json header = Json::object();
  Json entries = Json::object();
  for (const auto& [key, value] : recorded) entries[key] = value;
  header[kMetadataKey] = std::move(entries);
  for (const TensorInfo& info : infos) {
    Json entry = Json::object();
    entry["dtype"] = code_of(info.dtype);
    entry["shape"] = info.shape;
    entry["data_offsets"] = Json::array({info.begin, info.end});
    header[info.name] = std::move(entry);
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const Json::type_error& e) {
    throw ValueError(str("save_safetensors ", path, ": tensor names and metadata must be valid UTF-8 (", e.what(), ")"));
  }
  // The data section then starts 8-aligned in the file, hence in a page-aligned mapping of it.
  text.append((8 - text.size() % 8) % 8, ' ');

  write_file_atomic(path, [&](std::FILE* file) {
    uint64_t length = text.size();
    std::fwrite(&length, sizeof length, 1, file);
    std::fwrite(text.data(), 1, text.size(), file);
    for (size_t i : data_order) {
      const Tensor& tensor = tensors[i].second;
      if (tensor.nbytes() == 0) continue;
      Tensor packed = tensor.contiguous_untracked();  // one at a time: at most one extra copy alive
      std::fwrite(packed.data_ptr(), 1, packed.nbytes(), file);
    }
  });
  return checksum;
}

namespace {

void check_length_prefix_fits(const std::string& path, uint64_t file_size) {
  WEFT_CHECK(file_size >= 8, FormatError, path, ": not a safetensors file: ", file_size,
             " bytes, too short even for the 8-byte header length");
}

uint64_t checked_header_length(const std::string& path, const unsigned char* prefix, uint64_t file_size) {
  uint64_t length;
  std::memcpy(&length, prefix, sizeof length);
  WEFT_CHECK(length <= kMaxHeaderBytes, FormatError, path, ": header length ", length, " exceeds the ",
             kMaxHeaderBytes, "-byte limit of safetensors readers; the file is corrupt or not safetensors");
  WEFT_CHECK(length <= file_size - 8, FormatError, path, ": header length ", length,
             " runs past the end of the file (", file_size, " bytes); the file is truncated or not safetensors");
  return length;
}

// Nesting: the header is an object of objects whose shapes are arrays (metadata values are strings).
constexpr int kMaxHeaderDepth = 3;

// parse_json refuses what the format forbids and nlohmann alone would let through: a key twice
// (nlohmann keeps the last), a NUL byte (its lexer takes it for the end of input), nesting deeper
// than a header has (its dump recurses once per level).
Json parse_header_json(const std::string& path, std::string_view text) {
  WEFT_CHECK(!text.empty() && text.front() == '{', FormatError, path,
             ": header is not a JSON object (it must start with '{'); not a safetensors file");
  return parse_json<Json>(text, path + ": header", kMaxHeaderDepth);
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const Json& value) {
  WEFT_CHECK(value.is_object(), FormatError, path, ": \"", kMetadataKey, "\" must be an object of strings, found ",
             json_excerpt(value));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, entry] : value.items()) {
    WEFT_CHECK(entry.is_string(), FormatError, path, ": \"", kMetadataKey, "\" must map strings to strings, but ",
               quoted(key), " holds ", json_excerpt(entry));
    metadata[key] = entry.get<std::string>();
  }
  return metadata;
}

TensorInfo parse_tensor_entry(const std::string& path, const std::string& name, const Json& entry, uint64_t data_size) {
  const std::string where = str(path, ": tensor ", quoted(name));
  WEFT_CHECK(entry.is_object(), FormatError, where, ": expected an object with dtype, shape and data_offsets, found ",
             json_excerpt(entry));
  auto field = [&](const char* key) -> const Json& {
    auto it = entry.find(key);
    WEFT_CHECK(it != entry.end(), FormatError, where, ": no \"", key, "\"");
    return *it;
  };
  TensorInfo info;
  info.name = name;

  const Json& dtype = field("dtype");
  WEFT_CHECK(dtype.is_string(), FormatError, where, ": dtype must be a string such as \"F32\", found ",
             json_excerpt(dtype));
  std::optional<DType> parsed_dtype = dtype_of_code(dtype.get<std::string>());
  WEFT_CHECK(parsed_dtype, FormatError, where, ": dtype ", quoted(dtype.get<std::string>()),
             " is not supported by weft (it reads ", supported_codes(), ")");
  info.dtype = *parsed_dtype;

  const Json& shape = field("shape");
  WEFT_CHECK(shape.is_array(), FormatError, where, ": shape must be an array of sizes, found ", json_excerpt(shape));
  // The product of max(size, 1) bounds both numel and every row-major stride, so checking it
  // once keeps all of weft's index arithmetic on this tensor free of overflow.
  int64_t extent = 1;
  for (const Json& size : shape) {
    WEFT_CHECK(size.is_number_integer(), FormatError, where, ": shape ", json_excerpt(shape), " holds ", json_excerpt(size),
               "; sizes must be integers");
    WEFT_CHECK(size.is_number_unsigned(), FormatError, where, ": shape ", json_excerpt(shape), " has a negative size");
    uint64_t value = size.get<uint64_t>();
    WEFT_CHECK(value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                   !__builtin_mul_overflow(extent, std::max<int64_t>(static_cast<int64_t>(value), 1), &extent),
               FormatError, where, ": shape ", json_excerpt(shape), " has more elements than a tensor can index");
    info.shape.push_back(static_cast<int64_t>(value));
  }

  const Json& offsets = field("data_offsets");
  WEFT_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                 offsets[1].is_number_unsigned(),
             FormatError, where, ": data_offsets must be [begin, end] with non-negative integers, found ",
             json_excerpt(offsets));
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();
  WEFT_CHECK(info.begin <= info.end, FormatError, where, ": data_offsets [", info.begin, ", ", info.end,
             "] begin after they end");
  WEFT_CHECK(info.end <= data_size, FormatError, where, ": data_offsets [", info.begin, ", ", info.end,
             "] run past the end of the data section (", data_size, " bytes); the file is truncated or corrupt");
  uint64_t nbytes;
  bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(numel(info.shape)), dtype_size(info.dtype), &nbytes);
  WEFT_CHECK(!overflow && nbytes == info.end - info.begin, FormatError, where, ": shape ", shape_str(info.shape), " of ",
             dtype.get<std::string>(), " needs ", overflow ? std::string("more than 2^64") : std::to_string(nbytes),
             " bytes but data_offsets [", info.begin, ", ", info.end, "] hold ", info.end - info.begin);
  return info;
}

// The reference reader (safetensors' Metadata::validate) requires the tensors, sorted by offset,
// to start at 0, each begin where the previous ended, and the last end at the end of the file:
// the README's "the byte buffer needs to be entirely indexed, and cannot contain holes. This
// prevents the creation of polyglot files." weft enforces the same, so whatever it accepts,
// Hugging Face's loaders accept too.
void check_tiling(const std::string& path, const std::vector<TensorInfo>& tensors, uint64_t data_size) {
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& info : tensors) by_offset.push_back(&info);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* tensor : by_offset) {
    const TensorInfo& info = *tensor;
    WEFT_CHECK(info.begin >= covered, FormatError, path, ": tensors ", quoted(previous->name), " [", previous->begin,
               ", ", previous->end, ") and ", quoted(info.name), " [", info.begin, ", ", info.end,
               ") overlap in the data section");
    WEFT_CHECK(info.begin == covered, FormatError, path, ": bytes [", covered, ", ", info.begin,
               ") of the data section belong to no tensor; safetensors data must be packed without gaps");
    covered = info.end;
    previous = tensor;
  }
  WEFT_CHECK(covered == data_size, FormatError, path, ": bytes [", covered, ", ", data_size,
             ") at the end of the data section belong to no tensor; safetensors data must be packed without gaps");
}

SafetensorsHeader parse_header(const std::string& path, std::string_view text, uint64_t data_size) {
  Json json = parse_header_json(path, text);
  SafetensorsHeader header;
  header.data_start = 8 + text.size();
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) header.metadata = parse_metadata(path, value);
    else header.tensors.push_back(parse_tensor_entry(path, key, value, data_size));
  }
  check_tiling(path, header.tensors, data_size);
  return header;
}

void verify_checksum(const std::string& path, const SafetensorsHeader& header, const unsigned char* data,
                     uint64_t data_size) {
  auto recorded = header.metadata.find(kChecksumKey);
  if (recorded == header.metadata.end()) return;
  WEFT_CHECK(recorded->second.starts_with(kChecksumAlgorithm), FormatError, path, ": ", kChecksumKey, " is ",
             quoted(recorded->second), "; weft checks \"", kChecksumAlgorithm, "...\" (was it written by a newer weft?)");
  const std::string computed = checksum_text(XXH3_64bits_withSeed(data, data_size, header_hash(header.tensors, header.metadata)));
  WEFT_CHECK(recorded->second == computed, FormatError, path, ": its bytes do not match the checksum weft wrote with ",
             "them (", kChecksumKey, " ", quoted(recorded->second), ", the file hashes to ", computed,
             "): it was altered or damaged since it was saved");
}

// C++ reads a bool byte other than 0 or 1 as undefined behaviour, so such a file is refused
// rather than handed to kernels.
void check_bool_bytes(const std::string& path, const TensorInfo& info, const unsigned char* bytes) {
  if (info.dtype != DType::boolean) return;
  for (uint64_t i = 0; i < info.end - info.begin; ++i)
    WEFT_CHECK(bytes[i] <= 1, FormatError, path, ": tensor ", quoted(info.name), " is BOOL but element ", i,
               " holds the byte ", static_cast<int>(bytes[i]), "; BOOL elements must be 0 or 1");
}

Tensor borrow_from_mapping(const TensorInfo& info, unsigned char* bytes, const std::shared_ptr<void>& mapping) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::borrow(bytes, info.end - info.begin, mapping);
  impl->shape = info.shape;
  impl->strides = contiguous_strides(info.shape);
  impl->dtype = info.dtype;
  return Tensor(std::move(impl));
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::shared_ptr<void> mapping;
  uint64_t size;
  {
    InputFile file(path, UINT64_MAX);  // mapped, not read: its size is bounded by the address space
    size = file.size();
    check_length_prefix_fits(path, size);
    // Private and writable: writes to a tensor copy the page for this process, never reach the file.
    void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.fd(), 0);
    if (base == MAP_FAILED) throw IOError(str("cannot map ", path, " into memory: ", std::strerror(errno)));
    mapping = std::shared_ptr<void>(base, [size](void* p) { ::munmap(p, size); });
  }
  auto* bytes = static_cast<unsigned char*>(mapping.get());
  uint64_t length = checked_header_length(path, bytes, size);
  SafetensorsHeader header =
      parse_header(path, std::string_view(reinterpret_cast<const char*>(bytes) + 8, length), size - 8 - length);
  unsigned char* data = bytes + header.data_start;
  verify_checksum(path, header, data, size - header.data_start);
  for (const TensorInfo& info : header.tensors) check_bool_bytes(path, info, data + info.begin);

  SafetensorsFile loaded;
  loaded.metadata = std::move(header.metadata);
  for (const TensorInfo& info : header.tensors) {
    unsigned char* start = data + info.begin;
    // The mapping is page-aligned, so only the file's own layout can misalign a tensor.
    bool aligned = reinterpret_cast<uintptr_t>(start) % dtype_size(info.dtype) == 0;
    Tensor tensor = aligned ? borrow_from_mapping(info, start, mapping) : Tensor::empty(info.shape, info.dtype);
    if (!aligned && tensor.nbytes() > 0) std::memcpy(tensor.data_ptr(), start, tensor.nbytes());
    loaded.tensors.emplace_back(info.name, std::move(tensor));
  }
  return loaded;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  InputFile file(path, UINT64_MAX);
  check_length_prefix_fits(path, file.size());
  unsigned char prefix[8];
  file.read_at(prefix, sizeof prefix, 0);
  uint64_t length = checked_header_length(path, prefix, file.size());
  std::string text(length, '\0');
  file.read_at(text.data(), length, 8);
  return parse_header(path, text, file.size() - 8 - length);
}

}  // namespace weft::io
