// `weft bench hierarchy` as a user meets it: the tables, the JSON line, and one clear line with
// exit status 2 for a working set it cannot measure. Capped at small working sets and --quick, so
// it runs in about a second.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "weft/core/allocator.h"
#include "weft/core/error.h"
#include "weft_cli.h"

namespace weft {
namespace {

using testing::contains;
using testing::Outcome;
using testing::weft_cli;

TEST(BenchHierarchyCliTest, JsonHasMonotoneSizesPositiveFiguresOsCachesAndLevels) {
  Outcome o = weft_cli("bench hierarchy --max-bytes 8MiB --quick --json");
  ASSERT_EQ(o.status, 0) << o.output;
  const nlohmann::json j = testing::last_line_json(o.output);
  EXPECT_GT(j["core_hz"].get<double>(), 1e8);
  const nlohmann::json& sizes = j["sizes"];
  ASSERT_EQ(sizes.size(), 12u) << j.dump();  // 4 KiB to 8 MiB
  int64_t previous = 0;
  for (const nlohmann::json& s : sizes) {
    EXPECT_GT(s["bytes"].get<int64_t>(), previous);
    previous = s["bytes"].get<int64_t>();
    for (const char* key : {"latency_ns", "latency_cycles", "read_gbps"}) EXPECT_GT(s[key].get<double>(), 0) << key;
  }
  EXPECT_EQ(sizes.front()["bytes"], 4096);
  EXPECT_EQ(sizes.back()["bytes"], 8 << 20);
  for (const nlohmann::json& c : j["os_caches"]) {
    EXPECT_NE(c["type"], "Instruction");
    EXPECT_GT(c["bytes"].get<int64_t>(), 0);
  }
  ASSERT_FALSE(j["levels"].empty());
  EXPECT_EQ(j["levels"][0]["name"], "L1");
  for (const nlohmann::json& l : j["levels"]) EXPECT_GT(l["typical"]["latency_ns"].get<double>(), 0);
}

TEST(BenchHierarchyCliTest, TablesShowEveryWorkingSetTheLevelsAndTheHierarchy) {
  Outcome o = weft_cli("bench hierarchy --max-bytes 64KiB --quick");
  ASSERT_EQ(o.status, 0) << o.output;
  for (const char* says : {"core clock", "4 KiB", "64 KiB", "levels, where the latency steps up",
                           "the memory hierarchy of this machine", "registers"})
    EXPECT_TRUE(contains(o.output, says)) << says << " missing in\n" << o.output;
}

TEST(BenchHierarchyCliTest, BadWorkingSetsAreOneLineAndStatus2) {
  for (auto [args, says] : {std::pair{"--max-bytes 0", "--max-bytes: must be a positive byte count"},
                            std::pair{"--max-bytes 2KiB", "--max-bytes: must be a whole number of at least 4096"},
                            std::pair{"--max-bytes 64XB", "got '64XB'"},
                            std::pair{"--max-bytes -1GiB", "--max-bytes: must be a positive byte count"},
                            std::pair{"--max-bytes 1TiB", "at most "}}) {
    SCOPED_TRACE(args);
    testing::expect_usage_error(weft_cli(std::string("bench hierarchy ") + args), says);
  }
}

// The working set is allocated whole: one the size of the machine's memory is refused before any
// allocation, naming the bound (half the memory, or 16 GiB on a machine of more than 32 GiB).
TEST(BenchHierarchyCliTest, AWorkingSetOfAllTheMemoryIsRefused) {
  const int64_t memory = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  const std::string typed = std::to_string(memory);
  const Outcome o = weft_cli("bench hierarchy --quick --max-bytes " + typed);
  testing::expect_usage_error(o, "--max-bytes: must be a positive byte count such as 8, 1e6 or 256MiB, at most ");
  EXPECT_TRUE(contains(o.output, "got '" + typed + "'")) << o.output;
  if (memory / 2 < (int64_t{16} << 30)) {
    EXPECT_TRUE(contains(o.output, str("half of this machine's ", format_bytes(memory), " of memory"))) << o.output;
  }
}

}  // namespace
}  // namespace weft
