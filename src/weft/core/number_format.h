// Number formats seen bit by bit: what each DType can hold, and what a given number becomes
// when weft stores it. Everything is derived from a format's field widths and from weft's own
// conversions, never typed in:
//  - format_limits(t): size, range, smallest normal and subnormal, epsilon, decimal digits;
//  - store_float(v, t): the pattern weft stores for the double v in f64, f32, f16 or bf16
//    (f64 → f32 rounds to nearest even, then f32_to_f16_bits / f32_to_bf16_bits, exactly as
//    Tensor::to does), split into sign, exponent and mantissa, with the rounding error;
//  - quantize_int8_symmetric(v, scale): q = clamp(round_half_to_even(v / scale), -127, 127),
//    stored as two's complement, as PyTorch's quantize_per_tensor rounds.
// Invariants: a FloatBits' fields reassemble its pattern, and for finite values
// (-1)^negative × significand × 2^exponent equals value exactly (every value of these formats,
// and every field, is exact in a double).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "weft/core/dtype.h"

namespace weft {

// f64 f32 f16 bf16 i32 i8 u8 (i64's limits are not exact in a double; bool has none).
struct FormatLimits {
  DType dtype;
  int bits;               // storage size
  int exponent_bits;      // 0 for integers
  int mantissa_bits;      // stored fraction bits; 0 for integers
  int exponent_bias;      // 2^(exponent_bits - 1) - 1; 0 for integers
  int precision_bits;     // significant bits p: mantissa_bits + 1 (the implicit leading 1), or an
                          // integer's value bits; equals std::numeric_limits<T>::digits
  double lowest, max;     // finite range: max = (2 - 2^-mantissa_bits) × 2^bias for floats
  double min_normal;      // 2^(1 - bias); 0 for integers
  double min_subnormal;   // 2^(1 - bias - mantissa_bits); 0 for integers
  double epsilon;         // the gap between 1 and the next value: 2^-mantissa_bits; 1 for integers
  double decimal_digits;  // p × log10(2): the significand's precision in decimal digits
  int guaranteed_digits;  // digits that survive decimal → format → decimal, C++'s digits10:
                          // floor((p - 1) × log10 2) for floats, floor(p × log10 2) for integers
};
FormatLimits format_limits(DType t);  // throws DTypeError for i64 and bool
// A floating format's limits from its field widths, for formats that are not a DType: TF32, the
// tensor cores' multiply format for f32 matrices (8 exponent and 10 mantissa bits, 19 in all, held
// in f32's 32: float_limits(8, 10, 19)). `dtype` is f32 then, where its values live.
FormatLimits float_limits(int exponent_bits, int mantissa_bits, int bits);

enum class FloatKind { zero, subnormal, normal, infinity, nan };
const char* float_kind_name(FloatKind kind);  // "zero", "subnormal", ...

// One floating-point bit pattern, split into its fields.
struct FloatBits {
  DType dtype;              // f64, f32, f16 or bf16
  uint64_t pattern;         // in the low dtype_size(dtype) × 8 bits
  bool negative;            // the sign bit
  uint32_t exponent_field;  // the biased exponent as stored
  uint64_t mantissa_field;  // the stored fraction bits
  FloatKind kind;
  int exponent;             // unbiased: exponent_field - bias, or 1 - bias for zeros and subnormals
                            // (0 for infinities and NaN, which have none)
  double significand;       // 1.mantissa for normals, 0.mantissa for zeros and subnormals (0 for
                            // infinities and NaN)
  double value;             // what weft reads back: f16_bits_to_f32(pattern) for f16, ...

  std::string bit_groups() const;  // sign, exponent, mantissa: "0 01111111 00000000000000000000000"
  std::string hex() const;         // "0x3f800000"
};
FloatBits float_bits(uint64_t pattern, DType t);  // throws DTypeError unless t is floating

// What storing the double `given` in a floating format does to it.
struct StoredFloat {
  double given;
  FloatBits stored;
  double abs_error;  // |stored - given|: 0 when exact, inf on overflow, NaN when given is NaN
  double rel_error;  // abs_error / |given|, 0 when exact
  bool overflow;     // finite given, infinite stored
  bool underflow;    // non-zero given, zero stored
};
StoredFloat store_float(double given, DType t);  // throws DTypeError unless t is floating

// f64 → f32 with round-to-nearest-even, including the overflow to ±inf that a plain cast
// leaves undefined.
float f64_to_f32(double value);

struct Int8Quantized {
  double given, scale;
  int8_t q;            // stored as two's complement: static_cast<uint8_t>(q)
  bool clamped;        // round(given / scale) fell outside [-127, 127]
  double dequantized;  // q × scale
  double abs_error;    // |dequantized - given|
  double rel_error;    // abs_error / |given|, 0 when exact, inf for an infinite given
};
// Throws ValueError for a NaN value (int8 has none) or a scale that is not positive and finite.
Int8Quantized quantize_int8_symmetric(double value, double scale);
// max|v| / 127 over the finite values: the symmetric scale that maps the largest one to ±127.
// Empty when no finite value is non-zero.
std::optional<double> int8_symmetric_scale(std::span<const double> values);

// The exact decimal expansion of a double (every binary float has a finite one):
// 0.1f → "0.100000001490116119384765625", 2^-24 → "5.9604644775390625e-08". Positional
// notation between 1e-5 and 1e21, scientific outside; "inf", "-inf", "nan", "-0" as such.
// Relies on the C library printing exact digits, as glibc's printf does.
std::string exact_decimal(double value);

}  // namespace weft
