#include "weft/core/dtype.h"

#include "weft/core/error.h"

namespace weft {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::i8, DType::u8, DType::boolean})
    if (name == dtype_name(t)) return t;
  throw DTypeError(str("unknown dtype '", name, "': expected one of f64 f32 f16 bf16 i64 i32 i8 u8 bool"));
}

bool is_floating(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

std::ostream& operator<<(std::ostream& out, DType t) { return out << dtype_name(t); }

uint16_t f32_to_f16_bits(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (abs >= 0x38800000u) {  // normal in f16: rebias the exponent, round the 13 dropped bits
    uint32_t rebased = abs - 0x38000000u;
    return static_cast<uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
  }
  uint32_t exponent = abs >> 23;
  if (exponent < 102) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal in f16: count units of 2^-24, rounding the shifted-out bits to nearest even.
  uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - exponent;
  uint32_t q = mantissa >> shift;
  uint32_t rem = mantissa & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

float f16_bits_to_f32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace weft
