#include <gtest/gtest.h>

#include <set>
#include <string>

#include "weft/monitor/op_table.h"
#include "weft/monitor/profiler.h"

namespace weft {
namespace {

// A name found by text (a trace event, a backward scope) must lead back to its own row.
TEST(OpTable, EveryNameIsOneOpsAndLeadsBackToIt) {
  std::set<std::string> names;
  for (const OpInfo& info : kOps) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name << " is in the table twice";
    EXPECT_EQ(find_op(info.name), &info);
    EXPECT_STREQ(monitor::op_family(info.name), info.family);
  }
  EXPECT_EQ(find_op("no_such_op"), nullptr);
  EXPECT_STREQ(op_name(Op::scaled_dot_product_attention), "scaled_dot_product_attention");
  EXPECT_EQ(op_info(Op::cross_entropy).autocast, AutocastPolicy::f32_inside);
}

}  // namespace
}  // namespace weft
