// The bit-level view of number formats: limits computed from field widths agree with C++'s
// numeric_limits and with weft's own f16 / bf16 decoders; known values split into the right
// fields; every 16-bit pattern reassembles from its fields; int8 rounds half to even and clamps.
#include "weft/core/number_format.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "expect_error.h"
#include "weft/core/error.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

template <typename T>
void expect_limits_match_numeric_limits(DType t) {
  FormatLimits l = format_limits(t);
  using nl = std::numeric_limits<T>;
  EXPECT_EQ(l.bits, static_cast<int>(sizeof(T) * 8));
  EXPECT_EQ(l.precision_bits, nl::digits);
  EXPECT_EQ(l.guaranteed_digits, nl::digits10);
  EXPECT_EQ(l.max, static_cast<double>(nl::max()));
  EXPECT_EQ(l.lowest, static_cast<double>(nl::lowest()));
  if constexpr (nl::is_iec559) {
    EXPECT_EQ(l.min_normal, static_cast<double>(nl::min()));
    EXPECT_EQ(l.min_subnormal, static_cast<double>(nl::denorm_min()));
    EXPECT_EQ(l.epsilon, static_cast<double>(nl::epsilon()));
  } else {
    EXPECT_EQ(l.epsilon, 1);
  }
}

TEST(FormatLimitsTest, AgreeWithNumericLimitsForTheCppTypes) {
  expect_limits_match_numeric_limits<double>(DType::f64);
  expect_limits_match_numeric_limits<float>(DType::f32);
  expect_limits_match_numeric_limits<int32_t>(DType::i32);
  expect_limits_match_numeric_limits<int8_t>(DType::i8);
  expect_limits_match_numeric_limits<uint8_t>(DType::u8);
}

TEST(FormatLimitsTest, F16LimitsAreWhatWeftsConversionsDecode) {
  FormatLimits l = format_limits(DType::f16);
  EXPECT_EQ(l.bits, 16);
  EXPECT_EQ(l.exponent_bits, 5);
  EXPECT_EQ(l.mantissa_bits, 10);
  EXPECT_EQ(l.exponent_bias, 15);
  EXPECT_EQ(l.max, f16_bits_to_f32(0x7bff));
  EXPECT_EQ(l.max, 65504);
  EXPECT_EQ(l.min_normal, f16_bits_to_f32(0x0400));
  EXPECT_EQ(l.min_subnormal, f16_bits_to_f32(0x0001));
  EXPECT_EQ(l.min_subnormal, std::ldexp(1.0, -24));
  EXPECT_EQ(l.epsilon, f16_bits_to_f32(0x3c01) - 1.0);
  // max really is the largest: the next pattern up is infinity, and half a step past max rounds there.
  EXPECT_TRUE(std::isinf(f16_bits_to_f32(0x7c00)));
  EXPECT_EQ(f32_to_f16_bits(static_cast<float>(l.max + 15.99)), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(static_cast<float>(l.max + 16)), 0x7c00);
  EXPECT_NEAR(l.decimal_digits, 3.311, 1e-3);
  EXPECT_EQ(l.guaranteed_digits, 3);
}

TEST(FormatLimitsTest, BF16LimitsAreWhatWeftsConversionsDecode) {
  FormatLimits l = format_limits(DType::bf16);
  EXPECT_EQ(l.exponent_bits, 8);
  EXPECT_EQ(l.mantissa_bits, 7);
  EXPECT_EQ(l.max, bf16_bits_to_f32(0x7f7f));
  EXPECT_EQ(l.min_normal, bf16_bits_to_f32(0x0080));
  EXPECT_EQ(l.min_normal, static_cast<double>(FLT_MIN));  // bf16 keeps f32's exponent range
  EXPECT_EQ(l.min_subnormal, bf16_bits_to_f32(0x0001));
  EXPECT_EQ(l.epsilon, bf16_bits_to_f32(0x3f81) - 1.0);
  EXPECT_TRUE(std::isinf(bf16_bits_to_f32(0x7f80)));
  EXPECT_NEAR(l.decimal_digits, 2.408, 1e-3);
  EXPECT_EQ(l.guaranteed_digits, 2);
}

TEST(FormatLimitsTest, I64AndBoolHaveNoLimitsRow) {
  EXPECT_TRUE(contains(message_of<DTypeError>([] { format_limits(DType::i64); }), "i64"));
  EXPECT_TRUE(contains(message_of<DTypeError>([] { format_limits(DType::boolean); }), "bool"));
}

// ---- fields of known values ------------------------------------------------------------------

TEST(StoreFloatTest, OneInF32) {
  StoredFloat s = store_float(1.0, DType::f32);
  EXPECT_EQ(s.stored.pattern, 0x3f800000u);
  EXPECT_EQ(s.stored.hex(), "0x3f800000");
  EXPECT_EQ(s.stored.bit_groups(), "0 01111111 00000000000000000000000");
  EXPECT_FALSE(s.stored.negative);
  EXPECT_EQ(s.stored.exponent_field, 127u);
  EXPECT_EQ(s.stored.exponent, 0);
  EXPECT_EQ(s.stored.significand, 1.0);
  EXPECT_EQ(s.stored.kind, FloatKind::normal);
  EXPECT_EQ(s.abs_error, 0);
  EXPECT_EQ(s.rel_error, 0);
}

TEST(StoreFloatTest, TenthRoundsUpInF32AndBF16AndDownInF16) {
  StoredFloat f32 = store_float(0.1, DType::f32);
  EXPECT_EQ(f32.stored.hex(), "0x3dcccccd");
  EXPECT_EQ(f32.stored.exponent, -4);
  EXPECT_EQ(exact_decimal(f32.stored.value), "0.100000001490116119384765625");
  EXPECT_DOUBLE_EQ(f32.abs_error, 0.100000001490116119384765625 - 0.1);
  EXPECT_EQ(store_float(0.1, DType::f16).stored.hex(), "0x2e66");
  EXPECT_EQ(store_float(0.1, DType::f16).stored.value, 0.0999755859375);
  EXPECT_EQ(store_float(0.1, DType::bf16).stored.hex(), "0x3dcd");
  EXPECT_EQ(store_float(0.1, DType::bf16).stored.value, 0.10009765625);
}

TEST(StoreFloatTest, OneThirdInBF16KeepsEightSignificantBits) {
  StoredFloat s = store_float(1.0 / 3, DType::bf16);
  EXPECT_EQ(s.stored.pattern, 0x3eabu);  // 0x3eaaaaab in f32, rounded up at bit 16
  EXPECT_EQ(s.stored.bit_groups(), "0 01111101 0101011");
  EXPECT_EQ(s.stored.exponent, -2);
  EXPECT_EQ(s.stored.significand, 1 + 0x2b / 128.0);
  EXPECT_EQ(s.stored.value, 0.333984375);
  EXPECT_DOUBLE_EQ(s.abs_error, 0.333984375 - 1.0 / 3);
  EXPECT_NEAR(s.rel_error, 0.001953125, 1e-12);  // (0.333984375 - 1/3) × 3 = 2^-9
}

TEST(StoreFloatTest, LargestF16IsExactAndSeventyThousandOverflows) {
  StoredFloat max = store_float(65504, DType::f16);
  EXPECT_EQ(max.stored.pattern, 0x7bffu);
  EXPECT_EQ(max.stored.bit_groups(), "0 11110 1111111111");
  EXPECT_EQ(max.stored.exponent, 15);
  EXPECT_EQ(max.abs_error, 0);
  EXPECT_FALSE(max.overflow);

  StoredFloat over = store_float(70000, DType::f16);
  EXPECT_EQ(over.stored.pattern, 0x7c00u);
  EXPECT_EQ(over.stored.kind, FloatKind::infinity);
  EXPECT_TRUE(over.overflow);
  EXPECT_TRUE(std::isinf(over.abs_error));
  EXPECT_FALSE(store_float(70000, DType::bf16).overflow);  // bf16 has f32's range
  EXPECT_EQ(store_float(70000, DType::bf16).stored.value, 70144);
}

TEST(StoreFloatTest, SmallestF16SubnormalAndUnderflow) {
  StoredFloat tiny = store_float(std::ldexp(1.0, -24), DType::f16);
  EXPECT_EQ(tiny.stored.pattern, 0x0001u);
  EXPECT_EQ(tiny.stored.kind, FloatKind::subnormal);
  EXPECT_EQ(tiny.stored.exponent_field, 0u);
  EXPECT_EQ(tiny.stored.exponent, -14);
  EXPECT_EQ(tiny.stored.significand, std::ldexp(1.0, -10));  // 0.0000000001 in binary
  EXPECT_EQ(tiny.abs_error, 0);
  EXPECT_FALSE(tiny.underflow);

  StoredFloat gone = store_float(1e-8, DType::f16);
  EXPECT_EQ(gone.stored.pattern, 0x0000u);
  EXPECT_TRUE(gone.underflow);
  EXPECT_EQ(gone.abs_error, 1e-8);
  EXPECT_EQ(gone.rel_error, 1);
  EXPECT_FALSE(store_float(1e-8, DType::f32).underflow);
}

TEST(StoreFloatTest, NegativeZeroInfinityAndNaN) {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    StoredFloat zero = store_float(-0.0, t);
    EXPECT_TRUE(zero.stored.negative) << dtype_name(t);
    EXPECT_EQ(zero.stored.kind, FloatKind::zero);
    EXPECT_EQ(zero.abs_error, 0);
    EXPECT_FALSE(zero.underflow);

    StoredFloat inf = store_float(-INFINITY, t);
    EXPECT_EQ(inf.stored.kind, FloatKind::infinity);
    EXPECT_TRUE(inf.stored.negative);
    EXPECT_EQ(inf.abs_error, 0);
    EXPECT_FALSE(inf.overflow);

    StoredFloat nan = store_float(NAN, t);
    EXPECT_EQ(nan.stored.kind, FloatKind::nan);
    EXPECT_TRUE(std::isnan(nan.stored.value));
    EXPECT_TRUE(std::isnan(nan.abs_error));
  }
  EXPECT_EQ(store_float(-0.0, DType::f32).stored.hex(), "0x80000000");
  EXPECT_EQ(store_float(-0.0, DType::f16).stored.hex(), "0x8000");
  EXPECT_EQ(store_float(-INFINITY, DType::f16).stored.hex(), "0xfc00");
  EXPECT_EQ(store_float(NAN, DType::f32).stored.hex(), "0x7fc00000");
  EXPECT_EQ(store_float(NAN, DType::f16).stored.hex(), "0x7e00");
  EXPECT_EQ(store_float(NAN, DType::bf16).stored.hex(), "0x7fc0");
}

TEST(StoreFloatTest, F64ToF32RoundsToNearestEvenAndOverflowsAtHalfAStepPastMax) {
  EXPECT_EQ(f64_to_f32(1 + 0x1p-24), 1.0f);                    // tie: even 1.0
  EXPECT_EQ(f64_to_f32(1 + 3 * 0x1p-24), 1 + 0x1p-22f);        // tie: even neighbour
  EXPECT_EQ(f64_to_f32(0x1.ffffffp127), INFINITY);             // the tie above FLT_MAX
  EXPECT_EQ(f64_to_f32(-0x1.ffffffp127), -INFINITY);
  EXPECT_EQ(f64_to_f32(std::nextafter(0x1.ffffffp127, 0.0)), FLT_MAX);
  EXPECT_EQ(f64_to_f32(1e39), INFINITY);
  EXPECT_EQ(f64_to_f32(-1e300), -INFINITY);
  EXPECT_TRUE(store_float(1e39, DType::f32).overflow);
  EXPECT_TRUE(store_float(1e39, DType::bf16).overflow);
  EXPECT_EQ(f64_to_f32(0x1p-150), 0.0f);  // half of f32's smallest subnormal ties to zero
  EXPECT_EQ(f64_to_f32(0x1.8p-150), 0x1p-149f);
}

TEST(StoreFloatTest, F64PatternsSplitLikeF32Ones) {
  StoredFloat s = store_float(-2.5, DType::f64);
  EXPECT_EQ(s.stored.hex(), "0xc004000000000000");
  EXPECT_EQ(s.stored.bit_groups().substr(0, 16), "1 10000000000 01");
  EXPECT_EQ(s.stored.exponent, 1);
  EXPECT_EQ(s.stored.significand, 1.25);
}

// For every 16-bit pattern: the fields put back together give the pattern, and
// (-1)^sign × significand × 2^exponent gives what weft's decoder reads.
TEST(FloatBitsTest, EverySixteenBitPatternReassemblesFromItsFields) {
  for (DType t : {DType::f16, DType::bf16}) {
    FormatLimits l = format_limits(t);
    for (uint32_t p = 0; p <= 0xffff; ++p) {
      FloatBits b = float_bits(p, t);
      uint64_t reassembled = (uint64_t{b.negative} << (l.bits - 1)) |
                             (uint64_t{b.exponent_field} << l.mantissa_bits) | b.mantissa_field;
      ASSERT_EQ(reassembled, p) << dtype_name(t) << " " << p;
      if (b.kind == FloatKind::nan) {
        ASSERT_TRUE(std::isnan(b.value)) << p;
      } else if (b.kind == FloatKind::infinity) {
        ASSERT_TRUE(std::isinf(b.value)) << p;
      } else {
        double magnitude = std::ldexp(b.significand, b.exponent);
        ASSERT_EQ(b.negative ? -magnitude : magnitude, b.value) << dtype_name(t) << " " << p;
        ASSERT_EQ(b.kind == FloatKind::subnormal, b.value != 0 && std::fabs(b.value) < l.min_normal) << p;
      }
    }
  }
}

TEST(FloatBitsTest, IntegerDTypesAreRejected) {
  EXPECT_TRUE(contains(message_of<DTypeError>([] { float_bits(0, DType::i8); }), "i8"));
  EXPECT_TRUE(contains(message_of<DTypeError>([] { store_float(1, DType::u8); }), "f64 f32 f16 bf16"));
}

// ---- int8 ----------------------------------------------------------------------------------

TEST(Int8Test, RoundsHalfToEvenAndStoresTwosComplement) {
  Int8Quantized a = quantize_int8_symmetric(1.25, 0.5);  // 2.5 → 2
  EXPECT_EQ(a.q, 2);
  EXPECT_EQ(a.dequantized, 1.0);
  EXPECT_EQ(a.abs_error, 0.25);
  EXPECT_EQ(a.rel_error, 0.2);
  EXPECT_EQ(quantize_int8_symmetric(1.75, 0.5).q, 4);    // 3.5 → 4
  EXPECT_EQ(quantize_int8_symmetric(-1.25, 0.5).q, -2);  // -2.5 → -2
  EXPECT_EQ(quantize_int8_symmetric(0.25, 0.5).q, 0);    // 0.5 → 0
  Int8Quantized minus_one = quantize_int8_symmetric(-0.5, 0.5);
  EXPECT_EQ(minus_one.q, -1);
  EXPECT_EQ(static_cast<uint8_t>(minus_one.q), 0xff);
  EXPECT_EQ(static_cast<uint8_t>(quantize_int8_symmetric(-63.5, 0.5).q), 0x81);  // -127
  EXPECT_EQ(quantize_int8_symmetric(3.0, 0.5).abs_error, 0);
}

TEST(Int8Test, ClampsToPlusMinus127IncludingInfinity) {
  Int8Quantized big = quantize_int8_symmetric(100, 0.5);
  EXPECT_EQ(big.q, 127);
  EXPECT_TRUE(big.clamped);
  EXPECT_EQ(big.dequantized, 63.5);
  EXPECT_FALSE(quantize_int8_symmetric(63.5, 0.5).clamped);
  EXPECT_TRUE(quantize_int8_symmetric(63.75, 0.5).clamped);  // 127.5 → 128 (even), then clamped
  Int8Quantized low = quantize_int8_symmetric(-INFINITY, 0.5);
  EXPECT_EQ(low.q, -127);
  EXPECT_TRUE(low.clamped);
  EXPECT_TRUE(std::isinf(low.abs_error));
  EXPECT_TRUE(std::isinf(low.rel_error));
  EXPECT_EQ(quantize_int8_symmetric(1e300, 1e-300).q, 127);  // quotient overflows to inf
}

TEST(Int8Test, BadScaleOrNaNThrowValueError) {
  for (double scale : {0.0, -1.0, double{INFINITY}, double{NAN}})
    EXPECT_TRUE(contains(message_of<ValueError>([&] { quantize_int8_symmetric(1, scale); }), "positive and finite"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { quantize_int8_symmetric(NAN, 1); }), "NaN"));
}

TEST(Int8Test, SymmetricScaleMapsTheLargestFiniteMagnitudeTo127) {
  std::vector<double> values = {0.5, -2.54, INFINITY, NAN};
  ASSERT_TRUE(int8_symmetric_scale(values).has_value());
  EXPECT_DOUBLE_EQ(*int8_symmetric_scale(values), 0.02);
  EXPECT_EQ(quantize_int8_symmetric(-2.54, *int8_symmetric_scale(values)).q, -127);
  std::vector<double> nothing_to_scale = {0.0, -0.0, INFINITY};
  EXPECT_FALSE(int8_symmetric_scale(nothing_to_scale).has_value());
}

// ---- exact decimals --------------------------------------------------------------------------

TEST(ExactDecimalTest, PrintsEveryDigitOfTheBinaryValue) {
  EXPECT_EQ(exact_decimal(0.1), "0.1000000000000000055511151231257827021181583404541015625");
  EXPECT_EQ(exact_decimal(0.1f), "0.100000001490116119384765625");
  EXPECT_EQ(exact_decimal(0x1p-24), "5.9604644775390625e-08");
  EXPECT_EQ(exact_decimal(65504), "65504");
  EXPECT_EQ(exact_decimal(70000), "70000");
  EXPECT_EQ(exact_decimal(-2.5), "-2.5");
  EXPECT_EQ(exact_decimal(1e21), "1e+21");
  EXPECT_EQ(exact_decimal(0x1p-14), "0.00006103515625");
  EXPECT_EQ(exact_decimal(0x1p-17), "7.62939453125e-06");
  EXPECT_EQ(exact_decimal(FLT_MAX), "3.4028234663852885981170418348451692544e+38");
  EXPECT_EQ(exact_decimal(0x1p64), "18446744073709551616");
  EXPECT_EQ(exact_decimal(-0.0), "-0");
  EXPECT_EQ(exact_decimal(-INFINITY), "-inf");
  EXPECT_EQ(exact_decimal(NAN), "nan");
  // 2^-1074 has 751 significant digits and ends in ...625 (a power of 5).
  std::string smallest = exact_decimal(0x1p-1074);
  std::string mantissa = smallest.substr(0, smallest.find('e'));
  EXPECT_EQ(mantissa.size(), 752u) << smallest;  // the digits and the point
  EXPECT_EQ(smallest.substr(0, 8), "4.940656");
  EXPECT_EQ(smallest.substr(smallest.find('e') - 3), "625e-324");
}

}  // namespace
}  // namespace weft
