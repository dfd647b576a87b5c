// The bounded queue both batchers take their requests from.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "expect_error.h"
#include "weft/serve/queue.h"

namespace weft::serve {
namespace {

using weft::testing::contains;
using weft::testing::message_of;

const auto never_busy = [] { return false; };

TEST(RequestQueue, RefusesPastItsCapacityAndOnceClosedButStillGivesWhatWaits) {
  RequestQueue<int> queue(2);
  queue.push(1);
  queue.push(2);
  EXPECT_TRUE(contains(message_of<QueueFullError>([&] { queue.push(3); }),
                       "the queue is full (2 requests waiting); try again shortly"));
  EXPECT_EQ(queue.size(), 2);
  queue.close();
  EXPECT_TRUE(contains(message_of<ValueError>([&] { queue.push(4); }), "the server is shutting down"));
  EXPECT_EQ(queue.take({}, never_busy), (std::vector<int>{1, 2}));
  EXPECT_EQ(queue.take({}, never_busy), std::nullopt);
}

TEST(RequestQueue, TakesTheOldestThatFitTheWeightAndCountAndTheFirstWhateverItsWeight) {
  RequestQueue<int> queue(8);
  queue.push(1, 5);
  queue.push(2, 2);
  queue.push(3, 2);
  queue.push(4, 1);
  EXPECT_EQ(queue.take({.max_weight = 4}, never_busy), (std::vector<int>{1}));
  EXPECT_EQ(queue.take({.max_weight = 4}, never_busy), (std::vector<int>{2, 3}));
  queue.push(5);
  EXPECT_EQ(queue.take({.max_items = 1}, never_busy), (std::vector<int>{4}));
  EXPECT_EQ(queue.take({.max_items = 0}, [] { return true; }), std::vector<int>{});  // busy: returns with none
  EXPECT_EQ(queue.size(), 1);
}

TEST(RequestQueue, LingersForTheWeightToGatherAndNoLongerThanItsTime) {
  RequestQueue<int> queue(8);
  queue.push(1);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    queue.push(2);
  });
  // Without the second, this would wait 60 s.
  EXPECT_EQ(queue.take({.max_weight = 2, .linger_ms = 60000}, never_busy), (std::vector<int>{1, 2}));
  late.join();
  queue.push(3);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(queue.take({.max_weight = 2, .linger_ms = 30}, never_busy), (std::vector<int>{3}));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(25));
}

}  // namespace
}  // namespace weft::serve
