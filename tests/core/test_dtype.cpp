// DType metadata and the f16 / bf16 conversions, checked exhaustively: every 16-bit pattern,
// every rounding midpoint between neighbouring finite values, and hand-computed edge cases.
#include "weft/core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "weft/core/convert.h"
#include "weft/core/error.h"

namespace weft {
namespace {

constexpr DType kAll[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64,
                          DType::i32, DType::i8,  DType::u8,  DType::boolean};

uint32_t bits_of(float v) { return std::bit_cast<uint32_t>(v); }
float float_of(uint32_t bits) { return std::bit_cast<float>(bits); }

// Decoders written from the formats' definitions (ldexp), independent of the code under test.
float decode_f16(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0x1f) magnitude = mantissa ? NAN : INFINITY;
  else if (exponent == 0) magnitude = std::ldexp(mantissa, -24);
  else magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  return static_cast<float>(sign ? -magnitude : magnitude);
}
float decode_bf16(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 7) & 0xff, mantissa = h & 0x7f;
  double magnitude;
  if (exponent == 0xff) magnitude = mantissa ? NAN : INFINITY;
  else if (exponent == 0) magnitude = std::ldexp(mantissa, -133);
  else magnitude = std::ldexp(128 + mantissa, exponent - 134);
  return static_cast<float>(sign ? -magnitude : magnitude);
}
bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

TEST(DTypeTest, SizesAndNamesOfEveryDType) {
  const size_t sizes[] = {8, 4, 2, 2, 8, 4, 1, 1, 1};
  const char* names[] = {"f64", "f32", "f16", "bf16", "i64", "i32", "i8", "u8", "bool"};
  const bool floating[] = {true, true, true, true, false, false, false, false, false};
  for (size_t i = 0; i < std::size(kAll); ++i) {
    EXPECT_EQ(dtype_size(kAll[i]), sizes[i]) << names[i];
    EXPECT_STREQ(dtype_name(kAll[i]), names[i]);
    EXPECT_EQ(is_floating(kAll[i]), floating[i]) << names[i];
    EXPECT_EQ(dtype_from_name(names[i]), kAll[i]);
    std::ostringstream out;
    out << kAll[i];
    EXPECT_EQ(out.str(), names[i]);
  }
}

TEST(DTypeTest, StorageTypesMatchTheirDTypes) {
  EXPECT_EQ(dtype_of<dtype_traits<DType::f16>::type>(), DType::f16);
  EXPECT_EQ(dtype_of<dtype_traits<DType::bf16>::type>(), DType::bf16);
  EXPECT_EQ(dtype_of<dtype_traits<DType::boolean>::type>(), DType::boolean);
  for (DType t : kAll)
    visit_dtype(t, [&](auto tag) {
      EXPECT_EQ(dtype_of<decltype(tag)>(), t);
      EXPECT_EQ(sizeof(tag), dtype_size(t));
    });
}

TEST(DTypeTest, UnknownNameThrowsDTypeErrorListingTheValidNames) {
  for (const char* bad : {"float32", "F32", "", "bfloat16", "f8"}) {
    try {
      dtype_from_name(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const DTypeError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("f64 f32 f16 bf16 i64 i32 i8 u8 bool"), std::string::npos) << message;
    }
  }
}

// ---- f16 -------------------------------------------------------------------------------------

TEST(Float16Test, DecodeMatchesTheFormatDefinitionForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float got = f16_bits_to_f32(static_cast<uint16_t>(h)), want = decode_f16(static_cast<uint16_t>(h));
    if (f16_is_nan(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(bits_of(got), bits_of(want)) << std::hex << h;  // bitwise: -0 stays -0
    }
  }
}

TEST(Float16Test, RoundTripThroughF32IsTheIdentityAndNaNsComeBackQuiet) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    auto bits = static_cast<uint16_t>(h);
    uint16_t back = f32_to_f16_bits(f16_bits_to_f32(bits));
    if (f16_is_nan(bits)) {
      // Payload and sign kept, quiet bit (0x200) set: a signalling NaN comes back quiet.
      ASSERT_EQ(back, bits | 0x200u) << std::hex << h;
    } else {
      ASSERT_EQ(back, bits) << std::hex << h;
    }
  }
}

// For each pair of neighbouring finite f16 values (a, next) the f32 midpoint is exact (f16 has 11
// significant bits, f32 24): the midpoint ties to the even neighbour, and the f32 values just
// above and below it go to the nearer one.
TEST(Float16Test, EveryMidpointRoundsToEvenAndItsNeighboursToNearest) {
  for (uint16_t a = 0; a < 0x7c00; ++a) {
    uint16_t next = a + 1;
    float lo = decode_f16(a);
    float hi = next == 0x7c00 ? 65536.0f : decode_f16(next);  // where the next value would be
    float mid = (lo + hi) / 2;
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2) << "midpoint inexact at " << a;
    uint16_t even = (a & 1) ? next : a;
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(f32_to_f16_bits(s * lo), a | sign) << std::hex << a;
      ASSERT_EQ(f32_to_f16_bits(s * mid), even | sign) << std::hex << a;
      ASSERT_EQ(f32_to_f16_bits(s * std::nextafter(mid, INFINITY)), next | sign) << std::hex << a;
      ASSERT_EQ(f32_to_f16_bits(s * std::nextafter(mid, 0.0f)), a | sign) << std::hex << a;
    }
  }
}

TEST(Float16Test, OverflowSubnormalAndSignedZeroEdgeCases) {
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);      // largest finite
  EXPECT_EQ(f32_to_f16_bits(65519.99f), 0x7bff);     // just below the midpoint to 2^16
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);      // the midpoint ties to "even" 2^16 = inf
  EXPECT_EQ(f32_to_f16_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16_bits(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(FLT_MAX), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(-INFINITY), 0xfc00);

  EXPECT_EQ(f32_to_f16_bits(0x1p-24f), 0x0001);        // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(0x1p-25f), 0x0000);        // half of it: tie to even zero
  EXPECT_EQ(f32_to_f16_bits(-0x1p-25f), 0x8000);       // ... keeping the sign
  EXPECT_EQ(f32_to_f16_bits(0x1.000002p-25f), 0x0001); // just above the tie
  EXPECT_EQ(f32_to_f16_bits(1.5f * 0x1p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(3 * 0x1p-25f), 0x0002);    // 1.5 units: tie to even 2
  EXPECT_EQ(f32_to_f16_bits(5 * 0x1p-25f), 0x0002);    // 2.5 units: tie to even 2
  EXPECT_EQ(f32_to_f16_bits(1023 * 0x1p-24f), 0x03ff); // largest subnormal
  EXPECT_EQ(f32_to_f16_bits(1023.5f * 0x1p-24f), 0x0400);  // ties up into the smallest normal
  EXPECT_EQ(f32_to_f16_bits(0x1p-14f), 0x0400);        // smallest normal
  EXPECT_EQ(f32_to_f16_bits(0x1p-149f), 0x0000);       // f32 subnormals vanish
  EXPECT_EQ(f32_to_f16_bits(0x1p-26f), 0x0000);

  EXPECT_EQ(f32_to_f16_bits(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(f16_bits_to_f32(0x8000)));
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16_bits(1.0f + 0x1p-11f), 0x3c00);      // tie between 1 and 1+2^-10: even
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie between odd 0x3c01 and 0x3c02
  EXPECT_EQ(f32_to_f16_bits(-2.5f), 0xc100);
  EXPECT_EQ(f32_to_f16_bits(0.1f), 0x2e66);

  // NaNs stay NaN and come back quiet, whatever their payload.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7fffffffu}) {
    uint16_t h = f32_to_f16_bits(float_of(nan));
    EXPECT_TRUE(f16_is_nan(h)) << std::hex << nan;
    EXPECT_NE(h & 0x200, 0) << std::hex << nan;
    EXPECT_EQ((h & 0x8000) != 0, (nan & 0x80000000u) != 0) << std::hex << nan;
  }
}

// ---- bf16 ------------------------------------------------------------------------------------

TEST(BFloat16Test, DecodeMatchesTheFormatDefinitionForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    auto bits = static_cast<uint16_t>(h);
    float got = bf16_bits_to_f32(bits);
    if (bf16_is_nan(bits)) ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    else ASSERT_EQ(bits_of(got), bits_of(decode_bf16(bits))) << std::hex << h;
  }
}

TEST(BFloat16Test, RoundTripThroughF32IsTheIdentityAndNaNsComeBackQuiet) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    auto bits = static_cast<uint16_t>(h);
    uint16_t back = f32_to_bf16_bits(bf16_bits_to_f32(bits));
    if (bf16_is_nan(bits)) ASSERT_EQ(back, bits | 0x40u) << std::hex << h;
    else ASSERT_EQ(back, bits) << std::hex << h;
  }
}

// bf16 is the top half of an f32, so the midpoint between neighbours a and a+1 (same sign) is the
// f32 with bits (a << 16) | 0x8000, and its f32 neighbours differ by one in the low half.
TEST(BFloat16Test, EveryMidpointRoundsToEvenAndItsNeighboursToNearest) {
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t a = sign; a < (sign | 0x7f80u); ++a) {
      uint32_t next = a + 1, even = (a & 1) ? next : a;
      uint32_t mid = (a << 16) | 0x8000u;
      ASSERT_EQ(f32_to_bf16_bits(float_of(a << 16)), a) << std::hex << a;
      ASSERT_EQ(f32_to_bf16_bits(float_of(mid)), even) << std::hex << a;
      ASSERT_EQ(f32_to_bf16_bits(float_of(mid + 1)), next) << std::hex << a;
      ASSERT_EQ(f32_to_bf16_bits(float_of(mid - 1)), a) << std::hex << a;
      // The midpoint really is halfway (checked in double, where all three are exact).
      if (next != (sign | 0x7f80u)) {
        double lo = decode_bf16(static_cast<uint16_t>(a)), hi = decode_bf16(static_cast<uint16_t>(next));
        ASSERT_EQ(static_cast<double>(float_of(mid)), (lo + hi) / 2) << std::hex << a;
      }
    }
  }
}

TEST(BFloat16Test, OverflowSubnormalAndSignedZeroEdgeCases) {
  // FLT_MAX (0x7f7fffff) lies above the midpoint between bf16's largest finite 0x7f7f and 2^128:
  // round-to-nearest-even sends it to infinity.
  EXPECT_EQ(f32_to_bf16_bits(FLT_MAX), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(-FLT_MAX), 0xff80);
  EXPECT_EQ(f32_to_bf16_bits(float_of(0x7f7f7fffu)), 0x7f7f);  // just below that midpoint
  EXPECT_EQ(f32_to_bf16_bits(float_of(0x7f7f8000u)), 0x7f80);  // the midpoint: 0x7f7f is odd
  EXPECT_EQ(f32_to_bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(-INFINITY), 0xff80);
  EXPECT_EQ(bf16_bits_to_f32(0x7f7f), 0x1.fep127f);  // largest finite bf16

  EXPECT_EQ(f32_to_bf16_bits(float_of(0x00000001u)), 0x0000);  // f32's smallest subnormal
  EXPECT_EQ(f32_to_bf16_bits(float_of(0x00008000u)), 0x0000);  // tie to even zero
  EXPECT_EQ(f32_to_bf16_bits(float_of(0x00008001u)), 0x0001);  // bf16's smallest subnormal
  EXPECT_EQ(f32_to_bf16_bits(float_of(0x00018000u)), 0x0002);  // tie between 1 and 2: even
  EXPECT_EQ(f32_to_bf16_bits(float_of(0x007fffffu)), 0x0080);  // largest f32 subnormal rounds up
  EXPECT_EQ(bf16_bits_to_f32(0x0001), 0x1p-133f);

  EXPECT_EQ(f32_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 0x1p-8f), 0x3f80);       // tie: even 1.0
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3f82);   // tie: even 0x3f82
  EXPECT_EQ(f32_to_bf16_bits(0.1f), 0x3dcd);
  EXPECT_EQ(f32_to_bf16_bits(-3.14159265f), 0xc049);

  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    uint16_t h = f32_to_bf16_bits(float_of(nan));
    EXPECT_TRUE(bf16_is_nan(h)) << std::hex << nan;
    EXPECT_NE(h & 0x40, 0) << std::hex << nan;
    EXPECT_EQ((h & 0x8000) != 0, (nan & 0x80000000u) != 0) << std::hex << nan;
  }
}

TEST(DTypeTest, HalfAndBFloat16WrappersRoundOnConstruction) {
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);
  EXPECT_EQ(static_cast<float>(Half(0.1f)), 0.0999755859375f);
  EXPECT_EQ(BFloat16(1.0f + 0x1p-8f).bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(BFloat16(0.1f)), 0.10009765625f);
}

TEST(DTypeTest, ConvertTruncatesToIntegersAndTreatsNonZeroAsTrue) {
  EXPECT_EQ(convert<int64_t>(2.9), 2);
  EXPECT_EQ(convert<int64_t>(-2.9f), -2);
  EXPECT_EQ(convert<int32_t>(BFloat16(-7.75f)), -7);
  EXPECT_EQ(convert<uint8_t>(200.0), 200);
  EXPECT_TRUE(convert<bool>(0.25));
  EXPECT_TRUE(convert<bool>(Half(-1.0f)));
  EXPECT_FALSE(convert<bool>(-0.0));
  EXPECT_EQ(convert<Half>(1.0 + 0x1p-11).bits, 0x3c00);  // through f32 to f16, to nearest even
  EXPECT_EQ(convert<BFloat16>(Half(0.5f)).bits, 0x3f00);
  EXPECT_EQ(convert<double>(Half(-2.5f)), -2.5);
  EXPECT_EQ(convert<float>(int64_t{1} << 40), 0x1p40f);
}

}  // namespace
}  // namespace weft
