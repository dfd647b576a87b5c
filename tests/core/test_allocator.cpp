#include "expect_error.h"
#include "weft/core/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_TEST_UNDER_ASAN 1
#endif
#endif

namespace {

using weft::CachingAllocator;
using weft::SegmentSource;

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * KiB;

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
char* bytes(void* p) { return static_cast<char*>(p); }

using weft::testing::message_of;

TEST(CachingAllocatorTest, PointersAre64ByteAlignedAndUniqueForEverySize) {
  CachingAllocator a;
  const size_t sizes[] = {0, 0, 1, 7, 63, 64, 65, 511, 512, 513, 1000, 4095, 65537, 1 << 20};
  std::vector<void*> pointers;
  int64_t expected_allocated = 0;
  for (size_t size : sizes) {
    void* p = a.allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(address(p) % 64, 0u) << "size " << size;
    std::memset(p, 0xab, size);
    pointers.push_back(p);
    expected_allocated += static_cast<int64_t>((std::max<size_t>(size, 1) + 511) / 512 * 512);
  }
  EXPECT_EQ(a.stats().allocated_bytes, expected_allocated);
  for (size_t size : {size_t{1} << 20 | 1, size_t{3} << 20 | 5, size_t{10} << 20 | 77}) {
    void* p = a.allocate(size);
    EXPECT_EQ(address(p) % 64, 0u) << "size " << size;
    pointers.push_back(p);
  }
  std::vector<void*> sorted = pointers;
  std::ranges::sort(sorted);
  EXPECT_EQ(std::ranges::adjacent_find(sorted), sorted.end()) << "a pointer was handed out twice";
  for (void* p : pointers) a.deallocate(p);
  EXPECT_EQ(a.stats().allocated_bytes, 0);
}

TEST(CachingAllocatorTest, FreedBlockIsReusedAsCacheHit) {
  CachingAllocator a;
  void* first = a.allocate(1000);
  a.deallocate(first);
  void* second = a.allocate(900);
  EXPECT_EQ(second, first);
  const weft::MemoryStats s = a.stats();
  EXPECT_EQ(s.cache_misses, 1);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.num_segments, 1);
  a.deallocate(second);
}

TEST(CachingAllocatorTest, SmallRequestsSplitOneSegment) {
  CachingAllocator a;
  void* p = a.allocate(1000);
  void* q = a.allocate(5000);
  EXPECT_EQ(bytes(q), bytes(p) + 1024) << "the second block should be carved from the first segment's rest";
  const weft::MemoryStats s = a.stats();
  EXPECT_EQ(s.num_segments, 1);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.allocated_bytes, 1024 + 5120);
  EXPECT_EQ(s.cache_hits, 1);
  a.deallocate(p);
  a.deallocate(q);
}

TEST(CachingAllocatorTest, FreedNeighboursMergeInEitherOrder) {
  for (bool free_first_block_first : {true, false}) {
    SCOPED_TRACE(free_first_block_first ? "free left then right" : "free right then left");
    CachingAllocator a;
    void* left = a.allocate(512 * KiB);
    void* right = a.allocate(512 * KiB);
    void* rest = a.allocate(1 * MiB);  // fills the segment, so only a merged block can serve 1 MiB
    a.deallocate(free_first_block_first ? left : right);
    a.deallocate(free_first_block_first ? right : left);
    EXPECT_EQ(a.stats().largest_free_block, 1 * MiB);
    void* merged = a.allocate(1 * MiB);
    EXPECT_EQ(merged, left);
    EXPECT_EQ(a.stats().num_segments, 1);
    EXPECT_EQ(a.stats().cache_misses, 1);
    a.deallocate(merged);
    a.deallocate(rest);
  }
}

TEST(CachingAllocatorTest, FreeingTheMiddleBlockMergesBothSides) {
  CachingAllocator a;
  void* left = a.allocate(512 * KiB);
  void* middle = a.allocate(512 * KiB);
  void* right = a.allocate(1 * MiB);
  a.deallocate(left);
  a.deallocate(right);
  EXPECT_EQ(a.stats().largest_free_block, 1 * MiB);
  a.deallocate(middle);
  EXPECT_EQ(a.stats().largest_free_block, 2 * MiB);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0) << "a wholly merged segment should be released";
}

TEST(CachingAllocatorTest, ScriptedSequenceGivesExactStatistics) {
  CachingAllocator a;
  void* small = a.allocate(1000);  // 1024-byte block of a 2 MiB small segment
  EXPECT_EQ(a.stats().allocated_bytes, 1024);
  EXPECT_EQ(a.stats().reserved_bytes, 2 * MiB);

  void* b = a.allocate(3 * MiB);  // 4 MiB segment; the 1 MiB rest is too small to split off
  EXPECT_EQ(a.stats().allocated_bytes, 1024 + 4 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes, 6 * MiB);

  void* c = a.allocate(5 * MiB / 2);  // 4 MiB segment split into 2.5 + 1.5 MiB
  weft::MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 1024 + 13 * MiB / 2);
  EXPECT_EQ(s.reserved_bytes, 10 * MiB);
  EXPECT_EQ(s.inactive_split_bytes, (2 * MiB - 1024) + 3 * MiB / 2);

  a.deallocate(b);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 1024 + 5 * MiB / 2);
  EXPECT_EQ(s.peak_allocated_bytes, 1024 + 13 * MiB / 2);
  EXPECT_EQ(s.reserved_bytes, 10 * MiB);
  EXPECT_EQ(s.inactive_split_bytes, (2 * MiB - 1024) + 3 * MiB / 2) << "b's segment is wholly free, not split";

  void* d = a.allocate(3 * MiB / 2);  // best fit: c's 1.5 MiB rest, not b's 4 MiB block
  EXPECT_EQ(bytes(d), bytes(c) + 5 * MiB / 2);
  EXPECT_EQ(a.stats().inactive_split_bytes, 2 * MiB - 1024);

  void* e = a.allocate(3 * MiB);  // b's cached 4 MiB block, whole
  EXPECT_EQ(e, b);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 1024 + 8 * MiB);
  EXPECT_EQ(s.peak_allocated_bytes, 1024 + 8 * MiB);
  EXPECT_EQ(s.active_bytes, s.allocated_bytes);
  EXPECT_EQ(s.peak_active_bytes, s.peak_allocated_bytes);
  EXPECT_EQ(s.reserved_bytes, 10 * MiB);
  EXPECT_EQ(s.cache_hits, 2);
  EXPECT_EQ(s.cache_misses, 3);
  EXPECT_EQ(s.num_segments, 3);

  for (void* p : {small, c, d, e}) a.deallocate(p);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.inactive_split_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 10 * MiB);
  EXPECT_EQ(s.num_allocs, 5);
  EXPECT_EQ(s.num_frees, 5);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.peak_reserved_bytes, 10 * MiB);
  EXPECT_EQ(s.peak_allocated_bytes, 1024 + 8 * MiB);
}

TEST(CachingAllocatorTest, ResetPeakStatsSetsPeaksToCurrent) {
  CachingAllocator a;
  void* kept = a.allocate(4096);
  void* big = a.allocate(8 * MiB);
  a.deallocate(big);
  a.empty_cache();
  EXPECT_EQ(a.stats().peak_allocated_bytes, 4096 + 8 * MiB);
  EXPECT_EQ(a.stats().peak_reserved_bytes, 10 * MiB);
  a.reset_peak_stats();
  const weft::MemoryStats s = a.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 4096);
  EXPECT_EQ(s.peak_active_bytes, 4096);
  EXPECT_EQ(s.peak_reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.peak_inactive_split_bytes, 2 * MiB - 4096);
  a.deallocate(kept);
}

TEST(CachingAllocatorTest, EmptyCacheReleasesOnlyWhollyFreeSegments) {
  CachingAllocator a;
  void* first = a.allocate(1 * MiB);
  void* kept = a.allocate(1 * MiB);         // fills the first small segment
  void* second_segment = a.allocate(1 * MiB);  // a second small segment
  void* large = a.allocate(4 * MiB);
  a.deallocate(first);
  a.deallocate(second_segment);
  a.deallocate(large);
  EXPECT_EQ(a.stats().reserved_bytes, 8 * MiB);
  a.empty_cache();
  const weft::MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.num_segments, 1);
  EXPECT_EQ(s.allocated_bytes, 1 * MiB);
  std::memset(kept, 1, 1 * MiB);
  EXPECT_EQ(a.allocate(1 * MiB), first) << "the partly used segment keeps its free block cached";
  a.deallocate(first);
  a.deallocate(kept);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0);
  EXPECT_EQ(a.stats().num_segments, 0);
}

TEST(CachingAllocatorTest, InactiveSplitCountsFreeBytesBesideAllocatedBlocks) {
  CachingAllocator a;
  void* p = a.allocate(512 * KiB);
  void* q = a.allocate(512 * KiB);
  EXPECT_EQ(a.stats().inactive_split_bytes, 1 * MiB);
  a.deallocate(p);
  EXPECT_EQ(a.stats().inactive_split_bytes, 3 * MiB / 2);
  a.deallocate(q);
  EXPECT_EQ(a.stats().inactive_split_bytes, 0);
  EXPECT_EQ(a.stats().peak_inactive_split_bytes, 3 * MiB / 2);
}

TEST(CachingAllocatorTest, FragmentationComparesLargestFreeBlockWithFreeBytes) {
  CachingAllocator a;
  EXPECT_EQ(a.stats().fragmentation, 0.0);
  void* blocks[4];
  for (void*& block : blocks) block = a.allocate(512 * KiB);
  EXPECT_EQ(a.stats().fragmentation, 0.0) << "nothing is free";
  EXPECT_EQ(a.stats().largest_free_block, 0);
  a.deallocate(blocks[0]);
  a.deallocate(blocks[2]);
  weft::MemoryStats s = a.stats();
  EXPECT_EQ(s.largest_free_block, 512 * KiB);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.5);
  a.deallocate(blocks[1]);  // joins blocks 0..2 into one 1.5 MiB block
  s = a.stats();
  EXPECT_EQ(s.largest_free_block, 3 * MiB / 2);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  a.deallocate(blocks[3]);
}

TEST(CachingAllocatorTest, RequestOverLimitThrowsExplainingOutOfMemoryError) {
  CachingAllocator a;
  a.set_memory_limit(8 * MiB);
  void* kept = a.allocate(4 * MiB);
  const std::string message = message_of<weft::OutOfMemoryError>(
      [&] { a.allocate(6 * MiB, [] { return std::string("matmul output [4096, 4096] f32"); }); });
  for (const char* part : {"tried to allocate 6.00 MiB", "for matmul output [4096, 4096] f32", "limit 8.00 MiB",
                           "4.00 MiB allocated", "4.00 MiB reserved", "largest free block", "fragmentation"}) {
    EXPECT_NE(message.find(part), std::string::npos) << "missing \"" << part << "\" in: " << message;
  }
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().reserved_bytes, 4 * MiB);

  void* fits = a.allocate(2 * MiB);  // still usable, and 6 MiB stays within the limit
  EXPECT_EQ(a.stats().reserved_bytes, 6 * MiB);
  a.deallocate(fits);
  a.deallocate(kept);
}

TEST(CachingAllocatorTest, OutOfMemoryMessageOmitsEmptyWhat) {
  CachingAllocator a;
  a.set_memory_limit(1 * MiB);
  const std::string message = message_of<weft::OutOfMemoryError>([&] { a.allocate(1000); });
  EXPECT_EQ(message.find(" for "), std::string::npos) << message;
  EXPECT_NE(message.find("tried to allocate 1000 B; limit 1.00 MiB"), std::string::npos) << message;
}

TEST(CachingAllocatorTest, LimitReleasesCacheBeforeFailing) {
  CachingAllocator a;
  a.set_memory_limit(8 * MiB);
  a.deallocate(a.allocate(6 * MiB));  // leaves a cached 6 MiB segment
  void* p = a.allocate(7 * MiB);       // needs an 8 MiB segment: fits only once the cache is released
  const weft::MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes, 8 * MiB);
  EXPECT_EQ(s.num_segments, 1);
  EXPECT_EQ(s.num_ooms, 0);
  a.deallocate(p);
}

TEST(CachingAllocatorTest, AbsurdRequestThrowsOutOfMemoryError) {
  CachingAllocator a;
  const std::string message =
      message_of<weft::OutOfMemoryError>([&] {
        a.allocate(std::numeric_limits<size_t>::max(), [] { return std::string("absurd"); });
      });
  EXPECT_NE(message.find("for absurd"), std::string::npos) << message;
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().reserved_bytes, 0);
}

TEST(CachingAllocatorTest, SystemRefusalThrowsOutOfMemoryError) {
#if defined(WEFT_TEST_UNDER_ASAN)
  GTEST_SKIP() << "AddressSanitizer aborts on an impossible system allocation instead of returning null";
#else
  CachingAllocator a;
  a.deallocate(a.allocate(64));  // a cached segment, released before giving up
  const std::string message =
      message_of<weft::OutOfMemoryError>([&] { a.allocate(size_t{1} << 60, [] { return std::string("huge"); }); });
  EXPECT_NE(message.find("the host could not supply a 1048576.00 TiB segment"), std::string::npos) << message;
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().reserved_bytes, 0);
#endif
}

TEST(CachingAllocatorTest, LargeRequestsGetSegmentsRoundedTo2MiB) {
  CachingAllocator a;
  void* just_large = a.allocate(1 * MiB + 1);
  EXPECT_EQ(a.stats().reserved_bytes, 2 * MiB);
  a.deallocate(just_large);
  void* small = a.allocate(1000);  // the small pool never borrows the cached large block
  EXPECT_EQ(a.stats().reserved_bytes, 4 * MiB);
  EXPECT_EQ(a.stats().cache_misses, 2);
  void* p = a.allocate(10 * MiB + 1);
  EXPECT_EQ(a.stats().reserved_bytes, 16 * MiB);
  void* q = a.allocate(20 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes, 36 * MiB) << "a 20 MiB request reserves exactly 20 MiB";
  for (void* block : {small, p, q}) a.deallocate(block);
}

// fresh_block_bytes is what planning counts per tensor: it must be what a fresh segment gives.
TEST(CachingAllocatorTest, FreshBlockBytesIsWhatANewSegmentAllocates) {
  const std::vector<int64_t> requests = {1,           512,           513,     1 * MiB,  1 * MiB + 1,
                                         1605632,  // mlp's fc1 weight
                                         3 * MiB - 1, 3 * MiB + 512, 3964928, 11075584, 20 * MiB};
  for (int64_t request : requests) {
    CachingAllocator a;
    void* p = a.allocate(static_cast<size_t>(request));
    EXPECT_EQ(a.stats().allocated_bytes, weft::fresh_block_bytes(request)) << request << " bytes";
    a.deallocate(p);
  }
  EXPECT_EQ(weft::fresh_block_bytes(1605632), 2 * MiB) << "a remainder of at most 1 MiB stays with the block";
  EXPECT_EQ(weft::fresh_block_bytes(11075584), 11075584) << "a remainder over 1 MiB is split off";
  EXPECT_THROW(weft::fresh_block_bytes(-1), weft::ValueError);
}

TEST(CachingAllocatorTest, DeallocatingForeignOrFreedPointerThrowsValueError) {
  CachingAllocator a;
  a.deallocate(nullptr);
  int local = 0;
  EXPECT_THROW(a.deallocate(&local), weft::ValueError);
  void* p = a.allocate(4096);
  EXPECT_THROW(a.deallocate(bytes(p) + 512), weft::ValueError) << "an interior pointer is not a block";
  a.deallocate(p);
  EXPECT_THROW(a.deallocate(p), weft::ValueError) << "double free";
  EXPECT_EQ(a.stats().num_frees, 1);
}

TEST(CachingAllocatorTest, TraceRecordsEventsInOrderAsJson) {
  CachingAllocator a;
  a.enable_trace(true);
  void* p = a.allocate(1000, [] { return std::string("x"); });
  a.deallocate(p);
  a.set_memory_limit(4 * MiB);
  EXPECT_THROW(a.allocate(8 * MiB, [] { return std::string("big"); }), weft::OutOfMemoryError);

  const nlohmann::json events = nlohmann::json::parse(a.trace_json());
  ASSERT_TRUE(events.is_array());
  std::vector<std::string> actions;
  for (const auto& event : events) actions.push_back(event.at("action"));
  EXPECT_EQ(actions, (std::vector<std::string>{"segment_alloc", "alloc", "free", "segment_free", "oom"}));
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].at("seq"), i);
  const nlohmann::json& alloc = events.at(1);
  EXPECT_EQ(alloc.at("addr").get<uintptr_t>(), address(p));
  EXPECT_EQ(alloc.at("size"), 1024);
  EXPECT_EQ(alloc.at("what"), "x");
  EXPECT_EQ(alloc.at("allocated_after"), 1024);
  EXPECT_EQ(alloc.at("reserved_after"), 2 * MiB);
  EXPECT_EQ(events.at(2).at("allocated_after"), 0);
  EXPECT_EQ(events.at(3).at("reserved_after"), 0);
  EXPECT_EQ(events.at(4).at("size"), 8 * MiB);
  EXPECT_EQ(events.at(4).at("what"), "big");

  a.enable_trace(false);
  a.deallocate(a.allocate(64));
  EXPECT_EQ(nlohmann::json::parse(a.trace_json()).size(), 5u) << "disabling keeps the events, records no more";
  a.enable_trace(true);
  EXPECT_EQ(a.trace_json(), "[]");
}

TEST(CachingAllocatorTest, MemorySummaryShowsEveryRow) {
  CachingAllocator a;
  void* p = a.allocate(1536);
  std::string summary = a.memory_summary();
  for (const char* row : {"Allocated memory", "Active memory", "Reserved memory", "Inactive split memory",
                          "Allocations", "Frees", "Cache hits", "Cache misses", "Segments", "OOMs",
                          "Memory limit: none", "1.50 KiB", "2.00 MiB"}) {
    EXPECT_NE(summary.find(row), std::string::npos) << "missing \"" << row << "\" in:\n" << summary;
  }
  a.set_memory_limit(int64_t{1} << 30);
  summary = a.memory_summary();
  EXPECT_NE(summary.find("Memory limit: 1.00 GiB"), std::string::npos) << summary;
  a.deallocate(p);
}

TEST(CachingAllocatorTest, MemoryLimitIsSetAndValidated) {
  CachingAllocator a;
  EXPECT_EQ(a.memory_limit(), 0);
  a.set_memory_limit(256 * MiB);
  EXPECT_EQ(a.memory_limit(), 256 * MiB);
  EXPECT_THROW(a.set_memory_limit(-1), weft::ValueError);
  EXPECT_EQ(a.memory_limit(), 256 * MiB);
  a.set_memory_limit(4 * MiB);
  EXPECT_THROW(a.allocate(8 * MiB), weft::OutOfMemoryError);
  a.set_memory_limit(0);
  a.deallocate(a.allocate(8 * MiB));  // 0 lifts the limit
}

TEST(CachingAllocatorTest, ConcurrentRandomTrafficKeepsBlocksDisjointAndBalanced) {
  CachingAllocator a;
  constexpr unsigned kThreads = 4;
  std::atomic<int> corrupted{0};
  std::latch start(kThreads);  // maximises overlap: thread start-up would otherwise serialise them
  const auto traffic = [&](unsigned seed) {
    std::mt19937 rng(seed);
    start.arrive_and_wait();
    struct Live {
      void* ptr;
      size_t size;
      uint64_t stamp;
    };
    std::vector<Live> live;
    // Stamps both ends of each block (at least 16 bytes, so the stamps do not overlap) and checks
    // them on free: overlapping blocks would clobber them.
    const auto check_and_free = [&](const Live& block) {
      uint64_t head, tail;
      std::memcpy(&head, block.ptr, 8);
      std::memcpy(&tail, bytes(block.ptr) + block.size - 8, 8);
      if (head != block.stamp || tail != block.stamp) ++corrupted;
      a.deallocate(block.ptr);
    };
    // Enough operations that a missing lock corrupts the free sets even on a busy two-core machine.
    for (uint64_t op = 0; op < 20000; ++op) {
      if (!live.empty() && (live.size() > 24 || rng() % 2 == 0)) {
        const size_t victim = rng() % live.size();
        check_and_free(live[victim]);
        live[victim] = live.back();
        live.pop_back();
      } else {
        const size_t size = rng() % 10 == 0 ? 1 * MiB + rng() % (2 * MiB) : 16 + rng() % (64 * KiB);
        const uint64_t stamp = uint64_t{seed} << 32 | op;
        void* p = a.allocate(size);
        std::memcpy(p, &stamp, 8);
        std::memcpy(bytes(p) + size - 8, &stamp, 8);
        live.push_back({p, size, stamp});
      }
    }
    for (const Live& block : live) check_and_free(block);
  };
  std::vector<std::thread> threads;
  for (unsigned seed = 1; seed <= kThreads; ++seed) threads.emplace_back(traffic, seed);
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(corrupted.load(), 0);
  weft::MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_EQ(s.inactive_split_bytes, 0);
  EXPECT_EQ(s.largest_free_block > 0, s.reserved_bytes > 0);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes, 0) << "every segment must have merged back into one free block";
  EXPECT_EQ(s.num_segments, 0);
}

// Only CachingAllocator::cpu() reads WEFT_MEMORY_LIMIT, once per process, so each check runs in
// a freshly executed child ("threadsafe" death tests re-run the binary).
class MemoryLimitEnvironmentTest : public testing::Test {
 protected:
  void SetUp() override {
    saved_style_ = GTEST_FLAG_GET(death_test_style);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
  void TearDown() override { GTEST_FLAG_SET(death_test_style, saved_style_); }

 private:
  std::string saved_style_;
};

TEST_F(MemoryLimitEnvironmentTest, ValidValueBecomesTheLimitOfCpu) {
  EXPECT_EXIT(
      {
        setenv("WEFT_MEMORY_LIMIT", " 64MiB ", 1);
        CachingAllocator& cpu = CachingAllocator::cpu();
        if (cpu.memory_limit() != 64 * MiB) std::exit(2);
        try {
          cpu.allocate(100 * MiB);
        } catch (const weft::OutOfMemoryError&) {
          std::exit(0);
        }
        std::exit(3);
      },
      testing::ExitedWithCode(0), "");
}

TEST_F(MemoryLimitEnvironmentTest, BadValueThrowsValueErrorNamingTheVariable) {
  EXPECT_EXIT(
      {
        setenv("WEFT_MEMORY_LIMIT", "lots", 1);
        try {
          CachingAllocator::cpu();
        } catch (const weft::ValueError& error) {
          std::fputs(error.what(), stderr);
          std::exit(4);
        }
        std::exit(5);
      },
      testing::ExitedWithCode(4), "WEFT_MEMORY_LIMIT=\"lots\"");
}

TEST(ParseBytesTest, ReadsNumbersWithUnits) {
  EXPECT_EQ(weft::parse_bytes("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(weft::parse_bytes("512MiB"), 512 * MiB);
  EXPECT_EQ(weft::parse_bytes("64KiB"), 64 * KiB);
  EXPECT_EQ(weft::parse_bytes("1TiB"), int64_t{1} << 40);
  EXPECT_EQ(weft::parse_bytes("1.5GB"), 1'500'000'000);
  EXPECT_EQ(weft::parse_bytes("1e9"), 1'000'000'000);
  EXPECT_EQ(weft::parse_bytes("123"), 123);
  EXPECT_EQ(weft::parse_bytes("123B"), 123);
  EXPECT_EQ(weft::parse_bytes("0"), 0);
  EXPECT_EQ(weft::parse_bytes("  2 gib\t"), int64_t{2} << 30);
  EXPECT_EQ(weft::parse_bytes("3kb"), 3000);
  EXPECT_EQ(weft::parse_bytes("2TB"), 2'000'000'000'000);
  EXPECT_EQ(weft::parse_bytes("4Ki"), 4096);
  EXPECT_EQ(weft::parse_bytes("5M"), 5'000'000);
  EXPECT_EQ(weft::parse_bytes("0.5KiB"), 512);
}

TEST(ParseBytesTest, RejectsNonsenseNamingTheText) {
  for (const char* text : {"", "   ", "-1", "-2GiB", "abc", "GiB", "12XB", "1.5.2GB", "2 GiBs", "4KiBB", "nan",
                           "inf", "1e30", "1e400", "10 EiB"}) {
    const std::string message = message_of<weft::ValueError>([&] { weft::parse_bytes(text); });
    EXPECT_NE(message.find(std::string("\"") + text + "\""), std::string::npos) << message;
  }
}

TEST(FormatBytesTest, PicksTheLargestFittingBinaryUnit) {
  EXPECT_EQ(weft::format_bytes(0), "0 B");
  EXPECT_EQ(weft::format_bytes(512), "512 B");
  EXPECT_EQ(weft::format_bytes(1023), "1023 B");
  EXPECT_EQ(weft::format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(weft::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(weft::format_bytes(MiB - 1), "1.00 MiB");
  EXPECT_EQ(weft::format_bytes(64 * MiB), "64.00 MiB");
  EXPECT_EQ(weft::format_bytes(int64_t{2} << 30), "2.00 GiB");
  EXPECT_EQ(weft::format_bytes(int64_t{3} << 40), "3.00 TiB");
  EXPECT_EQ(weft::format_bytes(int64_t{2048} << 40), "2048.00 TiB");
}

}  // namespace

// Segments from another source (a device's memory, as kernels/cuda's allocator takes them): the
// same caching and statistics, every segment reserved and released through the source, and an
// out-of-memory error that names where the memory ran out.
namespace {
int64_t fake_reserved = 0, fake_segments = 0;
constexpr int64_t kFakeCapacity = 8 << 20;
}  // namespace

TEST(CachingAllocatorTest, SegmentsComeFromItsSourceAndGoBackToIt) {
  const SegmentSource fake{.reserve = [](size_t nbytes) -> void* {
                             if (fake_reserved + static_cast<int64_t>(nbytes) > kFakeCapacity) return nullptr;
                             fake_reserved += static_cast<int64_t>(nbytes);
                             ++fake_segments;
                             return std::aligned_alloc(64, nbytes);
                           },
                           .release = [](void* segment) {
                             --fake_segments;
                             std::free(segment);
                           },
                           .where = "fake:0"};
  {
    CachingAllocator a(fake);
    void* small = a.allocate(1000);
    void* large = a.allocate(3 << 20);
    EXPECT_EQ(fake_segments, 2);
    EXPECT_EQ(a.stats().num_segments, 2);
    a.deallocate(large);
    a.deallocate(a.allocate(3 << 20));  // served from the cache
    EXPECT_EQ(fake_segments, 2);
    EXPECT_EQ(a.stats().cache_hits, 1);
    a.deallocate(large = a.allocate(3 << 20));
    a.empty_cache();  // the large segment is wholly free: back to the source
    EXPECT_EQ(fake_segments, 1);
    const std::string message =
        message_of<weft::OutOfMemoryError>([&] { a.allocate(16 << 20, [] { return std::string("big"); }); });
    EXPECT_NE(message.find("fake:0 could not supply a 16.00 MiB segment"), std::string::npos) << message;
    EXPECT_NE(message.find("free memory on fake:0"), std::string::npos) << message;
    a.deallocate(small);
  }
  EXPECT_EQ(fake_segments, 0) << "the destructor releases what is left through the source";
}
