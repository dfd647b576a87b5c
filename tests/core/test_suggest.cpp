#include "weft/core/suggest.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

using Names = std::vector<std::string>;

TEST(Suggest, NamesCompareWithoutCaseSpacesDashesAndUnderscores) {
  EXPECT_EQ(name_key("RTX 4090"), "rtx4090");
  EXPECT_EQ(name_key("--Batch_Size"), "batchsize");
}

TEST(Suggest, ASwapOfNeighboursIsOneEdit) {
  EXPECT_EQ(closest_names("trian", {"train", "eval", "info"}), Names{"train"});
  EXPECT_EQ(closest_names("consolidat", {"consolidate"}), Names{"consolidate"});
}

// A part of a name suggests the names holding it, not those a letter away (H100 from A100).
TEST(Suggest, APartSuggestsTheNamesThatHoldIt) {
  EXPECT_EQ(closest_names("A100", {"A100-40GB", "A100-80GB", "H100", "H200"}), (Names{"A100-40GB", "A100-80GB"}));
  EXPECT_EQ(closest_names("4090", {"H100", "RTX4090"}), Names{"RTX4090"});
}

TEST(Suggest, NothingCloseSuggestsNothing) {
  EXPECT_TRUE(closest_names("export", {"train", "eval", "info", "plan"}).empty());
  EXPECT_TRUE(closest_names("", {"train"}).empty());
  EXPECT_EQ(did_you_mean({}), "");
  EXPECT_EQ(did_you_mean({"a", "b", "c"}), "; did you mean a, b or c?");
}

}  // namespace
}  // namespace weft
