// Reading and checking a flag's number: what each type takes, and the one message for what it
// does not.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "expect_error.h"
#include "weft/core/error.h"
#include "weft/core/flag_value.h"

namespace weft {
namespace {

using testing::message_of;

TEST(FlagValue, WholeNumbersAreDecimalDigitsThatFitTheType) {
  EXPECT_EQ(parse_flag<int64_t>("--n", "010"), 10);  // not octal
  EXPECT_EQ(parse_flag<int64_t>("--n", "+5"), 5);
  EXPECT_EQ(parse_flag<int64_t>("--n", "-7"), -7);
  EXPECT_EQ(parse_flag<int64_t>("--n", "9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse_flag<uint64_t>("--seed", "18446744073709551615"), std::numeric_limits<uint64_t>::max());
  for (const char* text : {"", "abc", "1.5", "1e3", "0x10", "12abc", " 5", "5 ", "+-5", "--5"})
    EXPECT_EQ(message_of<ValueError>([&] { parse_flag<int64_t>("--n", text); }),
              std::string("--n: must be a whole number, got '") + text + "'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<int64_t>("--n", "-99999999999999999999"); }),
            "--n: must be a whole number of at least -9223372036854775808, got '-99999999999999999999'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<int>("--threads", "99999999999"); }),
            "--threads: must be a whole number of at most 2147483647, got '99999999999'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<uint64_t>("--seed", "-1"); }),
            "--seed: must be a non-negative whole number, got '-1'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<uint64_t>("--seed", "18446744073709551616"); }),
            "--seed: must be a whole number of at most 18446744073709551615, got '18446744073709551616'");
}

TEST(FlagValue, RangesNameTheBoundThatWasCrossed) {
  EXPECT_EQ(parse_flag<int64_t>("--batch", "1", {.min = 1}), 1);
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<int64_t>("--batch", "0", {.min = 1}); }),
            "--batch: must be a positive whole number, got '0'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<int64_t>("--warmup", "-1", {.min = 0}); }),
            "--warmup: must be a non-negative whole number, got '-1'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<int64_t>("--batch", "99999999999999999999", {.min = 1}); }),
            "--batch: must be a whole number from 1 to 9223372036854775807, got '99999999999999999999'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<int>("--zero", "4", {.min = 0, .max = 3}); }),
            "--zero: must be a whole number from 0 to 3, got '4'");
  EXPECT_EQ(message_of<ValueError>([] { check_flag<int64_t>("--steps", 0, {.min = 1, .max = 1000}); }),
            "--steps: must be a whole number from 1 to 1000, got '0'");
}

TEST(FlagValue, RealsInARangeAreFinite) {
  EXPECT_EQ(parse_flag<double>("--lr", "1e-3", {.min = 0, .min_open = true}), 1e-3);
  EXPECT_EQ(parse_flag<double>("--p", "100", {.min = 0, .max = 100, .min_open = true}), 100);
  for (const char* text : {"0", "-1", "inf", "-inf", "nan", "1e400", "abc", "", "0x1p3", "1.5x"})
    EXPECT_EQ(message_of<ValueError>([&] { parse_flag<double>("--lr", text, {.min = 0, .min_open = true}); }),
              std::string("--lr: must be a finite positive number, got '") + text + "'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<double>("--wd", "-0.5", {.min = 0}); }),
            "--wd: must be a finite non-negative number, got '-0.5'");
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<double>("--f", "1", {.min = 0, .max = 1, .min_open = true, .max_open = true}); }),
            "--f: must be a number in (0, 1), got '1'");
  // Checked values print in their shortest form, not in hundreds of fixed-point digits.
  EXPECT_EQ(message_of<ValueError>([] { check_flag<double>("--epochs", 1e300, {.min = 0, .max = 1e12, .min_open = true}); }),
            "--epochs: must be a number in (0, 1e+12], got '1e+300'");
  EXPECT_EQ(message_of<ValueError>([] { check_flag<double>("--lr", NAN, {.min = 0, .min_open = true}); }),
            "--lr: must be a finite positive number, got 'nan'");
}

// Without a range a real takes what a double holds, inf and nan included: the option type behind
// the flag checks it (train::TrainOptions::validate).
TEST(FlagValue, WithoutARangeARealIsOnlyRead) {
  EXPECT_TRUE(std::isinf(parse_flag<double>("--lr", "inf")));
  EXPECT_TRUE(std::isnan(parse_flag<double>("--lr", "nan")));
  EXPECT_TRUE(testing::contains(message_of<ValueError>([] { parse_flag<double>("--lr", "1e400"); }),
                                "--lr: must be a number within a double's range"));
  EXPECT_EQ(message_of<ValueError>([] { parse_flag<double>("--lr", "abc"); }), "--lr: must be a number, got 'abc'");
}

}  // namespace
}  // namespace weft
