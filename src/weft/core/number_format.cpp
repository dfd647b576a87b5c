#include "weft/core/number_format.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "weft/core/error.h"

namespace weft {

namespace {

struct FloatLayout {
  int exponent_bits, mantissa_bits;
};

FloatLayout float_layout(DType t) {
  switch (t) {
    case DType::f64: return {11, 52};
    case DType::f32: return {8, 23};
    case DType::f16: return {5, 10};
    case DType::bf16: return {8, 7};
    default: break;
  }
  throw DTypeError(str("expected a floating-point dtype (f64 f32 f16 bf16), got ", dtype_name(t)));
}

double decode_with_weft(uint64_t pattern, DType t) {
  switch (t) {
    case DType::f64: return std::bit_cast<double>(pattern);
    case DType::f32: return std::bit_cast<float>(static_cast<uint32_t>(pattern));
    case DType::f16: return f16_bits_to_f32(static_cast<uint16_t>(pattern));
    default: return bf16_bits_to_f32(static_cast<uint16_t>(pattern));
  }
}

uint64_t encode_with_weft(double value, DType t) {
  switch (t) {
    case DType::f64: return std::bit_cast<uint64_t>(value);
    case DType::f32: return std::bit_cast<uint32_t>(f64_to_f32(value));
    case DType::f16: return f32_to_f16_bits(f64_to_f32(value));
    default: return f32_to_bf16_bits(f64_to_f32(value));
  }
}

}  // namespace

FormatLimits float_limits(int exponent_bits, int mantissa_bits, int bits) {
  const int e = exponent_bits, m = mantissa_bits;
  FormatLimits limits{};
  limits.dtype = DType::f32;
  limits.bits = bits;
  limits.exponent_bits = e;
  limits.mantissa_bits = m;
  limits.exponent_bias = (1 << (e - 1)) - 1;
  limits.precision_bits = m + 1;
  limits.max = std::ldexp(2.0 - std::ldexp(1.0, -m), limits.exponent_bias);
  limits.lowest = -limits.max;
  limits.min_normal = std::ldexp(1.0, 1 - limits.exponent_bias);
  limits.min_subnormal = std::ldexp(1.0, 1 - limits.exponent_bias - m);
  limits.epsilon = std::ldexp(1.0, -m);
  // Within one binade the spacing is fixed but a decade spans up to four binades, so only
  // p - 1 bits are guaranteed everywhere.
  limits.guaranteed_digits = static_cast<int>(std::floor((limits.precision_bits - 1) * std::log10(2.0)));
  limits.decimal_digits = limits.precision_bits * std::log10(2.0);
  return limits;
}

FormatLimits format_limits(DType t) {
  const double log10_2 = std::log10(2.0);
  FormatLimits limits{};
  if (is_floating(t)) {
    auto [e, m] = float_layout(t);
    limits = float_limits(e, m, static_cast<int>(dtype_size(t)) * 8);
    limits.dtype = t;
    return limits;
  }
  WEFT_CHECK(t == DType::i32 || t == DType::i8 || t == DType::u8, DTypeError,
             "format limits cover f64 f32 f16 bf16 i32 i8 u8, got ", dtype_name(t));
  limits.dtype = t;
  limits.bits = static_cast<int>(dtype_size(t)) * 8;
  const bool is_signed = t != DType::u8;
  limits.precision_bits = is_signed ? limits.bits - 1 : limits.bits;
  limits.max = std::ldexp(1.0, limits.precision_bits) - 1;
  limits.lowest = is_signed ? -std::ldexp(1.0, limits.precision_bits) : 0.0;
  limits.epsilon = 1;
  limits.guaranteed_digits = static_cast<int>(std::floor(limits.precision_bits * log10_2));
  limits.decimal_digits = limits.precision_bits * log10_2;
  return limits;
}

const char* float_kind_name(FloatKind kind) {
  switch (kind) {
    case FloatKind::zero: return "zero";
    case FloatKind::subnormal: return "subnormal";
    case FloatKind::normal: return "normal";
    case FloatKind::infinity: return "infinity";
    case FloatKind::nan: return "nan";
  }
  return "?";
}

FloatBits float_bits(uint64_t pattern, DType t) {
  auto [e, m] = float_layout(t);
  int bias = (1 << (e - 1)) - 1;
  uint32_t exponent_all_ones = (1u << e) - 1;
  FloatBits f{};
  f.dtype = t;
  f.pattern = pattern;
  f.negative = (pattern >> (e + m)) & 1u;
  f.exponent_field = static_cast<uint32_t>(pattern >> m) & exponent_all_ones;
  f.mantissa_field = pattern & ((uint64_t{1} << m) - 1);
  double fraction = std::ldexp(static_cast<double>(f.mantissa_field), -m);
  if (f.exponent_field == exponent_all_ones) {
    f.kind = f.mantissa_field ? FloatKind::nan : FloatKind::infinity;
  } else if (f.exponent_field == 0) {
    f.kind = f.mantissa_field ? FloatKind::subnormal : FloatKind::zero;
    f.exponent = 1 - bias;
    f.significand = fraction;
  } else {
    f.kind = FloatKind::normal;
    f.exponent = static_cast<int>(f.exponent_field) - bias;
    f.significand = 1 + fraction;
  }
  f.value = decode_with_weft(pattern, t);
  return f;
}

std::string FloatBits::bit_groups() const {
  auto [e, m] = float_layout(dtype);
  std::string out;
  for (int bit = e + m; bit >= 0; --bit) {
    out += ((pattern >> bit) & 1u) ? '1' : '0';
    if (bit == e + m || bit == m) out += ' ';
  }
  return out;
}

std::string FloatBits::hex() const {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", static_cast<int>(dtype_size(dtype) * 2),
                static_cast<unsigned long long>(pattern));
  return buf;
}

float f64_to_f32(double value) {
  // Halfway between FLT_MAX and 2^128: FLT_MAX's mantissa is odd, so the tie goes to infinity.
  constexpr double overflow_threshold = 0x1.ffffffp127;
  double magnitude = std::fabs(value);
  if (magnitude >= overflow_threshold) return value < 0 ? -INFINITY : INFINITY;
  if (magnitude > FLT_MAX) return value < 0 ? -FLT_MAX : FLT_MAX;
  return static_cast<float>(value);  // in range: to nearest even, the default rounding mode
}

StoredFloat store_float(double given, DType t) {
  StoredFloat s{};
  s.given = given;
  s.stored = float_bits(encode_with_weft(given, t), t);
  if (std::isnan(given)) {
    s.abs_error = s.rel_error = NAN;
  } else if (s.stored.value != given) {
    s.abs_error = std::fabs(s.stored.value - given);
    s.rel_error = s.abs_error / std::fabs(given);
  }
  s.overflow = std::isfinite(given) && std::isinf(s.stored.value);
  s.underflow = given != 0 && s.stored.value == 0;
  return s;
}

Int8Quantized quantize_int8_symmetric(double value, double scale) {
  WEFT_CHECK(std::isfinite(scale) && scale > 0, ValueError, "an int8 scale must be positive and finite, got ", scale,
             "; pass a scale such as max|v| / 127");
  WEFT_CHECK(!std::isnan(value), ValueError, "int8 has no NaN: there is nothing to quantize NaN to");
  Int8Quantized r{};
  r.given = value;
  r.scale = scale;
  // nearbyint rounds in the current mode, to nearest with ties to even (weft never changes it);
  // rounding before clamping keeps infinities and huge quotients out of the integer cast.
  double rounded = std::nearbyint(value / scale);
  double q = std::clamp(rounded, -127.0, 127.0);
  r.clamped = q != rounded;
  r.q = static_cast<int8_t>(q);
  r.dequantized = q * scale;
  if (r.dequantized != value) {
    r.abs_error = std::fabs(r.dequantized - value);
    r.rel_error = std::isinf(value) ? INFINITY : r.abs_error / std::fabs(value);
  }
  return r;
}

std::optional<double> int8_symmetric_scale(std::span<const double> values) {
  double largest = 0;
  for (double v : values)
    if (std::isfinite(v)) largest = std::max(largest, std::fabs(v));
  if (largest == 0) return std::nullopt;
  return largest / 127;
}

std::string exact_decimal(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  if (value == 0) return std::signbit(value) ? "-0" : "0";
  // A double has at most 767 significant decimal digits (2^-1074 has 751); print more, then
  // drop the trailing zeros to learn how many the value needs.
  char digits[1100];
  std::snprintf(digits, sizeof digits, "%.780e", value);
  const char* e = std::strchr(digits, 'e');
  int decimal_exponent = std::atoi(e + 1);
  const char* last = e - 1;
  while (*last == '0') --last;
  if (*last == '.') --last;
  int significant = 0;
  for (const char* c = digits; c <= last; ++c) significant += *c >= '0' && *c <= '9';
  char out[1100];
  if (decimal_exponent >= -5 && decimal_exponent < 21)
    std::snprintf(out, sizeof out, "%.*f", std::max(0, significant - 1 - decimal_exponent), value);
  else
    std::snprintf(out, sizeof out, "%.*e", significant - 1, value);
  return out;
}

}  // namespace weft
