// The precision vocabulary (amp/precision.h) that `weft train` and `weft plan` share.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "weft/amp/precision.h"
#include "weft/core/error.h"

namespace weft::amp {
namespace {

TEST(Precision, NamesRoundTripAndSayWhatTheForwardRunsIn) {
  for (Precision p : {Precision::fp32, Precision::fp16, Precision::bf16, Precision::bf16_pure})
    EXPECT_EQ(parse_precision(precision_name(p)), p) << precision_name(p);
  EXPECT_EQ(parse_precision("f32"), Precision::fp32);
  EXPECT_EQ(parse_precision("f16"), Precision::fp16);
  EXPECT_EQ(compute_dtype(Precision::fp32), std::nullopt);
  EXPECT_EQ(compute_dtype(Precision::fp16), DType::f16);
  EXPECT_EQ(compute_dtype(Precision::bf16), DType::bf16);
  EXPECT_EQ(compute_dtype(Precision::bf16_pure), DType::bf16);
  std::string message = testing::message_of<ValueError>([] { parse_precision("int3"); });
  EXPECT_TRUE(testing::contains(message, "'int3'") && testing::contains(message, "bf16-pure")) << message;
}

TEST(Precision, EachCallerAcceptsItsOwnNames) {
  EXPECT_EQ(parse_precision("bf16", kTrainedPrecisions), Precision::bf16);
  EXPECT_EQ(parse_precision("f16", kTrainedPrecisions), Precision::fp16);
  EXPECT_EQ(testing::message_of<ValueError>([] { parse_precision("bf16-pure", kTrainedPrecisions); }),
            "--precision: must be one of fp32, bf16, fp16, got 'bf16-pure'");
  EXPECT_EQ(precision_names(kAllPrecisions, "|"), "fp32|fp16|bf16|bf16-pure");
}

}  // namespace
}  // namespace weft::amp
