#include "weft/data/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "weft/core/error.h"
#include "weft/io/input_file.h"

namespace weft::data {
namespace {

struct IdxType {
  uint8_t code;
  const char* name;
  size_t width;  // bytes per element in the file
  DType dtype;   // what weft stores it as
};
constexpr IdxType kTypes[] = {{0x08, "u8", 1, DType::u8},   {0x09, "i8", 1, DType::i8},
                              {0x0B, "i16", 2, DType::i32}, {0x0C, "i32", 4, DType::i32},
                              {0x0D, "f32", 4, DType::f32}, {0x0E, "f64", 8, DType::f64}};

// Deflate cannot compress better than 1032:1, so a gzip file of n bytes inflates to at most this.
constexpr uint64_t kMaxDeflateRatio = 1032;

struct GzClose {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads until n bytes or the end of the data; a corrupt gzip stream, or one that ends before its
// trailer (cut short: even when every data byte arrived, the checksum did not), is a FormatError.
size_t read_bytes(gzFile f, void* out, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    int got = gzread(f, static_cast<char*>(out) + done, static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30)));
    if (got < 0) {
      int code = 0;
      const char* what = gzerror(f, &code);
      WEFT_CHECK(code != Z_ERRNO, IOError, "read_idx: cannot read '", path, "': ", std::strerror(errno));
      throw FormatError(str("read_idx: '", path, "': expected a valid gzip stream, found corrupt data (", what, ")"));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  int code = Z_OK;
  gzerror(f, &code);
  WEFT_CHECK(code != Z_BUF_ERROR, FormatError, "read_idx: '", path,
             "': truncated gzip stream: expected it to end with its checksum trailer, found the end of the file first");
  return done;
}

std::string hex_byte(unsigned char b) {
  char text[3];
  std::snprintf(text, sizeof text, "%02x", b);
  return text;
}

template <typename U>
void swap_bytes(void* data, int64_t n) {
  auto* p = static_cast<unsigned char*>(data);
  for (int64_t i = 0; i < n; ++i, p += sizeof(U)) {
    U v;
    std::memcpy(&v, p, sizeof(U));
    if constexpr (sizeof(U) == 2) v = __builtin_bswap16(v);
    if constexpr (sizeof(U) == 4) v = __builtin_bswap32(v);
    if constexpr (sizeof(U) == 8) v = __builtin_bswap64(v);
    std::memcpy(p, &v, sizeof(U));
  }
}

void from_big_endian(void* data, int64_t n, size_t width) {
  if constexpr (std::endian::native == std::endian::big) return;
  if (width == 2) swap_bytes<uint16_t>(data, n);
  if (width == 4) swap_bytes<uint32_t>(data, n);
  if (width == 8) swap_bytes<uint64_t>(data, n);
}

}  // namespace

Tensor read_idx(const std::string& path) {
  // Through io::InputFile, so that a directory, a FIFO (which gzopen would wait on forever) or a
  // device is refused before zlib reads it; zlib reads a duplicate of the checked descriptor.
  const io::InputFile input(path, io::usable_memory_bytes());
  const int fd = ::dup(input.fd());
  WEFT_CHECK(fd >= 0, IOError, "read_idx: cannot read '", path, "': ", std::strerror(errno));
  std::unique_ptr<gzFile_s, GzClose> file(gzdopen(fd, "rb"));
  if (!file) ::close(fd);
  WEFT_CHECK(file, IOError, "read_idx: cannot read '", path, "': zlib could not open it");
  gzFile f = file.get();
  const uint64_t file_bytes = input.size();

  unsigned char head[4];
  size_t got = read_bytes(f, head, 4, path);
  WEFT_CHECK(got == 4, FormatError, "read_idx: '", path, "': truncated header: expected 4 bytes, found ", got);
  WEFT_CHECK(head[0] == 0 && head[1] == 0, FormatError, "read_idx: '", path,
             "' is not an IDX file: expected magic bytes 00 00, found ", hex_byte(head[0]), " ",
             hex_byte(head[1]));
  const IdxType* type =
      std::find_if(std::begin(kTypes), std::end(kTypes), [&](const IdxType& t) { return t.code == head[2]; });
  WEFT_CHECK(type != std::end(kTypes), FormatError, "read_idx: '", path, "': expected an IDX type code (08 u8, 09 i8, ",
             "0b i16, 0c i32, 0d f32, 0e f64), found ", hex_byte(head[2]));
  int ndim = head[3];
  WEFT_CHECK(ndim > 0, FormatError, "read_idx: '", path, "': expected at least one dimension, found 0");

  std::vector<unsigned char> dims_be(4 * ndim);
  got = read_bytes(f, dims_be.data(), dims_be.size(), path);
  WEFT_CHECK(got == dims_be.size(), FormatError, "read_idx: '", path, "': truncated header: expected ",
             4 + dims_be.size(), " bytes, found ", 4 + got);
  uint64_t header_bytes = 4 + dims_be.size();
  // A corrupt header must not make us allocate more than the file could possibly hold.
  uint64_t max_data = std::min(io::usable_memory_bytes(), gzdirect(f) ? file_bytes - std::min(file_bytes, header_bytes)
                                                                         : file_bytes * kMaxDeflateRatio);
  uint64_t max_numel = max_data / type->width, count = 1;
  Shape shape(ndim);
  for (int d = 0; d < ndim; ++d) {
    const unsigned char* b = &dims_be[4 * d];
    shape[d] = int64_t{b[0]} << 24 | int64_t{b[1]} << 16 | int64_t{b[2]} << 8 | int64_t{b[3]};
    bool overflows = static_cast<uint64_t>(shape[d]) > max_numel / std::max<uint64_t>(count, 1);
    count = overflows ? max_numel + 1 : count * shape[d];
  }
  WEFT_CHECK(std::find(shape.begin(), shape.end(), 0) == shape.end(), FormatError, "read_idx: '", path,
             "': expected nonzero dimensions, found ", shape_str(shape));
  WEFT_CHECK(count <= max_numel, FormatError, "read_idx: '", path, "': header shape ", shape_str(shape), " ",
             type->name, " needs more data than the file can hold (at most ", max_data,
             " bytes): truncated file or corrupt header");

  int64_t n = numel(shape);
  size_t data_bytes = static_cast<size_t>(n) * type->width;
  Tensor out = Tensor::empty(shape, type->dtype);
  std::vector<int16_t> i16(type->width == 2 ? n : 0);
  void* raw = type->width == 2 ? static_cast<void*>(i16.data()) : out.data_ptr();
  got = read_bytes(f, raw, data_bytes, path);
  WEFT_CHECK(got == data_bytes, FormatError, "read_idx: '", path, "': truncated data: header shape ", shape_str(shape),
             " ", type->name, " needs ", data_bytes, " bytes, found ", got);
  char extra;
  WEFT_CHECK(read_bytes(f, &extra, 1, path) == 0, FormatError, "read_idx: '", path,
             "': expected the file to end after the ", data_bytes, " bytes of data of shape ", shape_str(shape),
             ", found trailing bytes");
  from_big_endian(raw, n, type->width);
  if (type->width == 2) std::copy(i16.begin(), i16.end(), out.data<int32_t>());
  return out;
}

}  // namespace weft::data
