// The memory hierarchy measurement's parts, each on inputs whose answer is known: Sattolo's cycle,
// the OS's cache sizes from a sysfs-shaped directory, the levels of a latency curve drawn by hand,
// and a small real measurement.
#include "weft/monitor/hierarchy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "../temp_dir.h"
#include "expect_error.h"
#include "weft/core/error.h"

namespace weft {
namespace {

using monitor::HierarchyPoint;
using monitor::OsCache;

TEST(HierarchyTest, RandomCycleVisitsEveryNodeOnceBeforeReturning) {
  for (int64_t n : {2, 3, 7, 64, 1000, 65536}) {
    SCOPED_TRACE(n);
    const std::vector<int64_t> next = monitor::random_cycle(n, static_cast<uint64_t>(n) * 7919);
    ASSERT_EQ(static_cast<int64_t>(next.size()), n);
    std::vector<bool> seen(static_cast<size_t>(n), false);
    int64_t node = 0;
    for (int64_t step = 0; step < n; ++step) {
      ASSERT_GE(node, 0);
      ASSERT_LT(node, n);
      ASSERT_FALSE(seen[static_cast<size_t>(node)]) << "node " << node << " seen twice after " << step << " steps";
      seen[static_cast<size_t>(node)] = true;
      node = next[static_cast<size_t>(node)];
    }
    EXPECT_EQ(node, 0) << "the walk did not close after n steps";
  }
}

TEST(HierarchyTest, RandomCycleDependsOnTheSeedAndNeedsTwoNodes) {
  EXPECT_NE(monitor::random_cycle(1000, 1), monitor::random_cycle(1000, 2));
  EXPECT_EQ(monitor::random_cycle(1000, 1), monitor::random_cycle(1000, 1));
  EXPECT_TRUE(testing::contains(testing::message_of<ValueError>([] { monitor::random_cycle(1, 0); }), "at least 2"));
}

void write_cache(const std::string& dir, const std::string& index, const std::string& level, const std::string& type,
                 const std::string& size) {
  std::filesystem::create_directories(dir + "/" + index);
  std::ofstream(dir + "/" + index + "/level") << level << "\n";
  std::ofstream(dir + "/" + index + "/type") << type << "\n";
  std::ofstream(dir + "/" + index + "/size") << size << "\n";
}

TEST(HierarchyTest, OsCachesAreReadFromSysfsWithoutInstructionCaches) {
  testing::TempDir dir;
  // Listed out of level order, and with the entries sysfs has beside index*.
  write_cache(dir.path(), "index3", "3", "Unified", "266240K");
  write_cache(dir.path(), "index0", "1", "Data", "48K");
  write_cache(dir.path(), "index1", "1", "Instruction", "32K");
  write_cache(dir.path(), "index2", "2", "Unified", "2048K");
  std::ofstream(dir.file("uevent")) << "\n";
  const std::vector<OsCache> caches = monitor::os_caches(dir.path());
  ASSERT_EQ(caches.size(), 3u);
  EXPECT_EQ(caches[0].level, 1);
  EXPECT_EQ(caches[0].type, "Data");
  EXPECT_EQ(caches[0].bytes, 48 * 1024);
  EXPECT_EQ(caches[1].level, 2);
  EXPECT_EQ(caches[1].bytes, 2 << 20);
  EXPECT_EQ(caches[2].level, 3);
  EXPECT_EQ(caches[2].type, "Unified");
  EXPECT_EQ(caches[2].bytes, int64_t{260} << 20);
}

TEST(HierarchyTest, OsCachesOfAMissingDirectoryAreNoneAndABadSizeIsRefused) {
  EXPECT_TRUE(monitor::os_caches("/nonexistent/cpu0/cache").empty());
  testing::TempDir dir;
  write_cache(dir.path(), "index0", "1", "Data", "48 furlongs");
  EXPECT_TRUE(
      testing::contains(testing::message_of<FormatError>([&] { monitor::os_caches(dir.path()); }), "48 furlongs"));
}

// A curve as this kind of machine draws it: 4 KiB to 1 GiB, L1 to 32 KiB, L2 to 1 MiB, L3 to
// 16 MiB, RAM beyond, with one working set part way through each step.
std::vector<HierarchyPoint> synthetic_curve() {
  std::vector<HierarchyPoint> points;
  for (int64_t bytes = 4096; bytes <= int64_t{1} << 30; bytes *= 2) {
    double ns = bytes <= 32 << 10   ? 1.2
                : bytes == 64 << 10 ? 2.5
                : bytes <= 1 << 20  ? 4.0
                : bytes == 2 << 20  ? 9.0
                : bytes <= 16 << 20 ? 15.0 + bytes / double(16 << 20)
                : bytes == 32 << 20 ? 50.0
                                    : 95.0 + bytes / double(1 << 30) * 10;
    points.push_back({bytes, ns, ns * 3, 100.0 / ns});
  }
  return points;
}

const std::vector<OsCache> kCaches = {{1, "Data", 48 << 10}, {2, "Unified", 2 << 20}, {3, "Unified", 32 << 20}};

TEST(HierarchyTest, LevelsOfASyntheticCurveAreL1L2L3AndRam) {
  const auto levels = monitor::detect_levels(synthetic_curve(), kCaches);
  ASSERT_EQ(levels.size(), 4u);
  EXPECT_EQ(levels[0].name, "L1");
  EXPECT_EQ(levels[0].smallest_bytes, 4 << 10);
  EXPECT_EQ(levels[0].largest_bytes, 32 << 10);
  EXPECT_EQ(levels[0].os_bytes, 48 << 10);
  EXPECT_DOUBLE_EQ(levels[0].typical.latency_ns, 1.2);
  EXPECT_EQ(levels[1].name, "L2");
  EXPECT_EQ(levels[1].smallest_bytes, 128 << 10);  // 64 KiB is part way up the step
  EXPECT_EQ(levels[1].largest_bytes, 1 << 20);
  EXPECT_EQ(levels[1].os_bytes, 2 << 20);
  EXPECT_DOUBLE_EQ(levels[1].typical.latency_ns, 4.0);
  EXPECT_EQ(levels[2].name, "L3");
  EXPECT_EQ(levels[2].smallest_bytes, 4 << 20);
  EXPECT_EQ(levels[2].largest_bytes, 16 << 20);
  EXPECT_EQ(levels[2].os_bytes, 32 << 20);
  EXPECT_EQ(levels[3].name, "RAM");
  EXPECT_EQ(levels[3].smallest_bytes, 64 << 20);
  EXPECT_EQ(levels[3].largest_bytes, 1 << 30);
  EXPECT_EQ(levels[3].os_bytes, 0);
  EXPECT_GT(levels[3].typical.latency_ns, 90);
}

TEST(HierarchyTest, LevelsOfACurveThisMachineMeasured) {
  // `weft bench hierarchy` on this 2-core VM once: the step into RAM passes through 16 MiB, and
  // RAM's latency then climbs slowly (TLB reach, open DRAM pages) without starting a new level.
  const double ns[] = {1.68,  1.68,  1.70,   1.67,   7.38,   7.35,   7.35,   8.17,   6.95,  16.72,
                       33.49, 35.19, 101.60, 129.57, 131.34, 136.78, 140.58, 148.12, 169.31};
  std::vector<HierarchyPoint> points;
  for (double latency : ns) points.push_back({int64_t{4096} << points.size(), latency, latency * 3, 1});
  const std::vector<OsCache> caches = {{1, "Data", 48 << 10}, {2, "Unified", 2 << 20}, {3, "Unified", 260 << 20}};
  const auto levels = monitor::detect_levels(points, caches);
  ASSERT_EQ(levels.size(), 4u);
  const std::pair<int64_t, int64_t> expected[] = {
      {4 << 10, 32 << 10}, {64 << 10, 1 << 20}, {4 << 20, 8 << 20}, {16 << 20, 1 << 30}};
  const char* names[] = {"L1", "L2", "L3", "RAM"};
  for (size_t k = 0; k < 4; ++k) {
    SCOPED_TRACE(names[k]);
    EXPECT_EQ(levels[k].name, names[k]);
    EXPECT_EQ(levels[k].smallest_bytes, expected[k].first);
    EXPECT_EQ(levels[k].largest_bytes, expected[k].second);
  }
}

TEST(HierarchyTest, ACurveThatStopsInsideTheLastCacheHasNoRam) {
  std::vector<HierarchyPoint> points = synthetic_curve();
  points.resize(13);  // 4 KiB to 16 MiB
  const auto levels = monitor::detect_levels(points, kCaches);
  ASSERT_EQ(levels.size(), 3u);
  EXPECT_EQ(levels[2].name, "L3");
}

TEST(HierarchyTest, ACacheWithNoPlateauGivesItsNumberToTheNextOne) {
  // L2 hidden: latency climbs steadily from 64 KiB to 1 MiB; with no OS sizes, no plateau is RAM.
  std::vector<HierarchyPoint> points;
  for (double ns : {1.0, 1.0, 1.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 100.0, 101.0, 102.0})
    points.push_back({int64_t{4096} << points.size(), ns, ns * 3, 1});
  const auto levels = monitor::detect_levels(points, {});
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[0].name, "L1");
  EXPECT_EQ(levels[1].name, "L2");
  EXPECT_EQ(levels[1].smallest_bytes, int64_t{4096} << 9);
}

TEST(HierarchyTest, ASmallMeasurementHasEverySizeAndPositiveFigures) {
  monitor::HierarchyOptions options;
  options.max_bytes = 1 << 20;
  options.quick = true;
  const monitor::ClockRates clock = monitor::clock_rates();
  EXPECT_GT(clock.core_hz, 1e8);
  EXPECT_LT(clock.core_hz, 1e10);
  int seen = 0;
  const auto points = monitor::measure_hierarchy(options, clock.core_hz, [&](const HierarchyPoint&) { ++seen; });
  ASSERT_EQ(points.size(), 9u);  // 4 KiB to 1 MiB
  EXPECT_EQ(seen, 9);
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_EQ(points[i].bytes, int64_t{4096} << i);
    EXPECT_GT(points[i].latency_ns, 0);
    EXPECT_NEAR(points[i].latency_cycles, points[i].latency_ns * clock.core_hz / 1e9, 1e-6 * points[i].latency_cycles);
    EXPECT_GT(points[i].read_gbps, 0);
  }
}

}  // namespace
}  // namespace weft
