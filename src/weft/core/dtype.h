// Number formats. DType names a tensor's element type; f16 and bf16 are stored as raw 16-bit
// patterns (Half, BFloat16) and converted to and from f32 with round-to-nearest-even, overflow
// to ±inf, NaN kept NaN (quiet), and subnormals exact.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace weft {

enum class DType : uint8_t { f64, f32, f16, bf16, i64, i32, i8, u8, boolean };

size_t dtype_size(DType t);        // bytes per element
const char* dtype_name(DType t);   // "f32", "bf16", ...
DType dtype_from_name(const std::string& name);  // inverse of dtype_name; throws DTypeError
bool is_floating(DType t);         // f64 f32 f16 bf16
std::ostream& operator<<(std::ostream& out, DType t);

uint16_t f32_to_f16_bits(float value);
float f16_bits_to_f32(uint16_t bits);
inline uint16_t f32_to_bf16_bits(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline float bf16_bits_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Storage types for the 16-bit formats: arithmetic goes through float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float v) : bits(f32_to_f16_bits(v)) {}
  operator float() const { return f16_bits_to_f32(bits); }
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float v) : bits(f32_to_bf16_bits(v)) {}
  operator float() const { return bf16_bits_to_f32(bits); }
};

// The C++ type that stores a DType's elements.
template <DType T> struct dtype_traits;
template <> struct dtype_traits<DType::f64> { using type = double; };
template <> struct dtype_traits<DType::f32> { using type = float; };
template <> struct dtype_traits<DType::f16> { using type = Half; };
template <> struct dtype_traits<DType::bf16> { using type = BFloat16; };
template <> struct dtype_traits<DType::i64> { using type = int64_t; };
template <> struct dtype_traits<DType::i32> { using type = int32_t; };
template <> struct dtype_traits<DType::i8> { using type = int8_t; };
template <> struct dtype_traits<DType::u8> { using type = uint8_t; };
template <> struct dtype_traits<DType::boolean> { using type = bool; };

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

// Calls fn(T{}) with T the storage type of `t`: the one switch every dtype-generic loop uses.
template <typename Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::f64: return fn(double{});
    case DType::f32: return fn(float{});
    case DType::f16: return fn(Half{});
    case DType::bf16: return fn(BFloat16{});
    case DType::i64: return fn(int64_t{});
    case DType::i32: return fn(int32_t{});
    case DType::i8: return fn(int8_t{});
    case DType::u8: return fn(uint8_t{});
    case DType::boolean: return fn(bool{});
  }
  return fn(float{});
}

}  // namespace weft
