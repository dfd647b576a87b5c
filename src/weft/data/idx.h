// IDX: the file format of MNIST and Fashion-MNIST. Two zero bytes, a type code (0x08 u8, 0x09 i8,
// 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64), a dimension count, that many big-endian u32 sizes,
// then the elements, big-endian, row-major.
//
// read_idx returns a contiguous tensor of exactly that shape holding exactly those values; weft
// has no i16, so i16 files widen to i32. A file is either plain or gzip (detected from its
// content, not its name). Anything else fails loudly rather than yielding a partial tensor:
// a missing or unreadable file, or a path that is not a regular file, is an IOError, and a wrong
// magic, an unknown type code, no dimensions or a zero one, a header claiming more data than the
// file could hold (checked before allocating), truncated data, a gzip stream cut short or corrupt,
// or trailing bytes are FormatErrors; both name the path.
#pragma once
#include <string>

#include "weft/core/tensor.h"

namespace weft::data {

Tensor read_idx(const std::string& path);

}  // namespace weft::data
