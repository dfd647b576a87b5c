// `weft dtype` as a user runs it: the bits of each value per format, the table, --json, and one
// clear line with status 2 for every bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "weft_cli.h"

namespace weft {
namespace {

using testing::contains;
using testing::expect_usage_error;
using testing::Outcome;
using testing::weft_cli;

nlohmann::json json_of(const Outcome& o) {
  EXPECT_EQ(o.status, 0) << o.output;
  return nlohmann::json::parse(o.output);
}

TEST(DtypeCommandTest, ShowsBitsStoredValueAndErrorPerFormat) {
  Outcome o = weft_cli("dtype 0.1");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "f32   0 01111011 10011001100110011001101  0x3dcccccd")) << o.output;
  EXPECT_TRUE(contains(o.output, "= (-1)^0 × 2^-4 × 1.60000002384185791015625")) << o.output;
  EXPECT_TRUE(contains(o.output, "stored 0.100000001490116119384765625   error +1.49e-09")) << o.output;
  EXPECT_TRUE(contains(o.output, "f16   0 01011 1001100110  0x2e66")) << o.output;
  EXPECT_TRUE(contains(o.output, "stored 0.0999755859375   error -2.44e-05")) << o.output;
  EXPECT_TRUE(contains(o.output, "bf16  0 01111011 1001101  0x3dcd")) << o.output;
  EXPECT_TRUE(contains(o.output, "f64 0x3fb999999999999a = 0.1000000000000000055511151231257827021181…")) << o.output;
  // One value: the computed scale maps it to 127 exactly.
  EXPECT_TRUE(contains(o.output, "max|value| / 127 over the values given")) << o.output;
  EXPECT_TRUE(contains(o.output, "int8  0 1111111  0x7f")) << o.output;
}

TEST(DtypeCommandTest, SaysWhenAValueOverflowsUnderflowsOrIsSubnormal) {
  Outcome o = weft_cli("dtype 70000 1e-8 1e-6");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "0x7c00")) << o.output;
  EXPECT_TRUE(contains(o.output, "overflow: f16's largest finite value is 65504; from 65520")) << o.output;
  EXPECT_TRUE(contains(o.output, "underflow: |value| is at most half f16's smallest subnormal 2^-24")) << o.output;
  EXPECT_TRUE(contains(o.output, "subnormal: below f16's smallest normal 2^-14")) << o.output;
  EXPECT_TRUE(contains(o.output, "rounds to 0: |value| is at most half the scale")) << o.output;
}

TEST(DtypeCommandTest, AcceptsInfinitiesNaNAndNegativeZeroWithoutDashDash) {
  Outcome o = weft_cli("dtype -inf nan -0 -2.5e-3");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "1 11111111 00000000000000000000000  0xff800000")) << o.output;
  EXPECT_TRUE(contains(o.output, "0x7fc00000")) << o.output;
  EXPECT_TRUE(contains(o.output, "NaN stays NaN")) << o.output;
  EXPECT_TRUE(contains(o.output, "int8 has no NaN")) << o.output;
  EXPECT_TRUE(contains(o.output, "0x80000000")) << o.output;
  EXPECT_TRUE(contains(o.output, "-0: the sign bit is set")) << o.output;
  // -inf clamps to -127; -2.5e-3 is tiny beside the scale max|finite value| / 127 = 2.5e-3 / 127.
  EXPECT_TRUE(contains(o.output, "q = -127 = -128 + 1")) << o.output;
  EXPECT_TRUE(contains(o.output, "clamped")) << o.output;
}

TEST(DtypeCommandTest, GivenScaleRoundsHalfToEvenAndClamps) {
  Outcome o = weft_cli("dtype --scale 0.5 1.25 100");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "scale 0.5 (given by --scale)")) << o.output;
  EXPECT_TRUE(contains(o.output, "value / scale = 2.5 → q = 2")) << o.output;
  EXPECT_TRUE(contains(o.output, "value / scale = 200 → q = 127")) << o.output;
  EXPECT_TRUE(contains(o.output, "clamped: |value| / scale rounds beyond 127")) << o.output;
}

TEST(DtypeCommandTest, JsonHasEveryFormatPerValue) {
  nlohmann::json j = json_of(weft_cli("dtype --json --scale 0.5 65504 -1"));
  ASSERT_EQ(j["values"].size(), 2u);
  const nlohmann::json& max = j["values"][0];
  EXPECT_EQ(max["input"], "65504");
  EXPECT_EQ(max["f16"]["hex"], "0x7bff");
  EXPECT_EQ(max["f16"]["bits"], "0 11110 1111111111");
  EXPECT_EQ(max["f16"]["exponent"], 15);
  EXPECT_EQ(max["f16"]["abs_error"], 0.0);
  EXPECT_EQ(max["bf16"]["stored"], 65536.0);
  EXPECT_EQ(max["f32"]["class"], "normal");
  EXPECT_EQ(max["int8"]["q"], 127);
  EXPECT_EQ(max["int8"]["clamped"], true);
  const nlohmann::json& minus_one = j["values"][1];
  EXPECT_EQ(minus_one["int8"]["hex"], "0xfe");  // -2
  EXPECT_EQ(minus_one["int8"]["stored"], -1.0);
  EXPECT_EQ(j["int8_scale"], 0.5);

  nlohmann::json over = json_of(weft_cli("dtype --json 70000"));
  EXPECT_EQ(over["values"][0]["f16"]["class"], "infinity");
  EXPECT_EQ(over["values"][0]["f16"]["stored_exact"], "inf");
  EXPECT_TRUE(contains(over["values"][0]["f16"]["notes"][0].get<std::string>(), "overflow"));
}

TEST(DtypeCommandTest, TableIsComputedFromTheFieldWidths) {
  Outcome o = weft_cli("dtype --table");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "65504")) << o.output;
  EXPECT_TRUE(contains(o.output, "2^-24 = 5.96e-08")) << o.output;
  EXPECT_TRUE(contains(o.output, "2^-126 = 1.175e-38")) << o.output;
  EXPECT_TRUE(contains(o.output, "-2147483648 .. 2147483647")) << o.output;
  EXPECT_TRUE(contains(o.output, "7.22 (6)")) << o.output;

  nlohmann::json j = json_of(weft_cli("dtype --table --json"));
  ASSERT_EQ(j["formats"].size(), 8u);
  // TF32 after f32: f32's exponent (its range) with f16's 10 mantissa bits, 4 bytes in memory.
  const nlohmann::json& tf32 = j["formats"][2];
  EXPECT_EQ(tf32["dtype"], "tf32");
  EXPECT_EQ(tf32["bits"], 19);
  EXPECT_EQ(tf32["bytes"], 4);
  EXPECT_EQ(tf32["exponent_bits"], j["formats"][1]["exponent_bits"]);
  EXPECT_EQ(tf32["mantissa_bits"], j["formats"][3]["mantissa_bits"]);
  EXPECT_EQ(tf32["epsilon"], j["formats"][3]["epsilon"]);
  EXPECT_EQ(tf32["min_normal"], j["formats"][1]["min_normal"]);
  EXPECT_EQ(tf32["max"], 3.4011621342146535e+38) << "(2 - 2^-10) x 2^127";
  EXPECT_EQ(j["formats"][3]["dtype"], "f16");
  EXPECT_EQ(j["formats"][3]["max"], 65504.0);
  EXPECT_EQ(j["formats"][3]["exponent_bias"], 15);
  EXPECT_EQ(j["formats"][4]["dtype"], "bf16");
  EXPECT_EQ(j["formats"][4]["precision_bits"], 8);
  EXPECT_EQ(j["formats"][7]["dtype"], "u8");
  EXPECT_EQ(j["formats"][7]["max"], 255.0);
  EXPECT_FALSE(j["formats"][7].contains("min_normal"));
  EXPECT_TRUE(contains(o.output, "tf32     19     4        8       10")) << o.output;
}

TEST(DtypeCommandTest, BadInputExitsTwoWithOneLine) {
  expect_usage_error(weft_cli("dtype abc"), "'abc'");
  expect_usage_error(weft_cli("dtype 0.1 1.2.3"), "'1.2.3'");
  expect_usage_error(weft_cli("dtype --jsn 1"), "'--jsn'");
  expect_usage_error(weft_cli("dtype"), "--table");
  expect_usage_error(weft_cli("dtype 1e400"), "VALUE: must be within f64's range");
  expect_usage_error(weft_cli("dtype --table abc"), "VALUE: must be a number such as 0.1");
  expect_usage_error(weft_cli("dtype --scale 0 1"), "--scale: must be a finite positive number, got '0'");
  expect_usage_error(weft_cli("dtype --scale -1 1"), "got '-1'");
  expect_usage_error(weft_cli("dtype --scale inf 1"), "got 'inf'");
  expect_usage_error(weft_cli("dtype --scale nan 1"), "--scale");
  expect_usage_error(weft_cli("dtype --scale x 1"), "--scale");
}

}  // namespace
}  // namespace weft
