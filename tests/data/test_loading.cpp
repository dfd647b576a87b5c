// Samplers and the DataLoader: orders, distributed shares, batching, prefetch, errors, shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/data/dataloader.h"
#include "weft/data/sampler.h"

namespace weft::data {
namespace {

using weft::testing::contains;
using weft::testing::message_of;

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(Sampler, SequentialCountsUp) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(3), range(5));
  message_of<ValueError>([] { SequentialSampler(-1); });
}

TEST(Sampler, RandomIsAPermutationFixedBySeedAndEpoch) {
  RandomSampler s(1000, 42);
  std::vector<int64_t> e0 = s.indices(0);
  EXPECT_EQ(sorted(e0), range(1000));
  EXPECT_NE(e0, range(1000));
  manual_seed(123);  // the global generator plays no part
  EXPECT_EQ(RandomSampler(1000, 42).indices(0), e0);
  EXPECT_NE(s.indices(1), e0);
  EXPECT_NE(RandomSampler(1000, 43).indices(0), e0);
  EXPECT_NE(RandomSampler(1000, 43).indices(0), s.indices(1));  // (seed + 1, epoch) is not (seed, epoch + 1)
  EXPECT_EQ(RandomSampler(1, 0).indices(5), range(1));
  EXPECT_TRUE(RandomSampler(0, 0).indices(0).empty());
}

TEST(Sampler, DistributedUnshuffledMatchesPyTorch) {
  // torch DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False)
  std::vector<std::vector<int64_t>> want{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(DistributedSampler(10, r, 3, false, 0).indices(0), want[r]);
  std::vector<std::vector<int64_t>> dropped{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(DistributedSampler(10, r, 3, false, 0, true).indices(0), dropped[r]);
}

TEST(Sampler, DistributedShufflesOneListAcrossRanks) {
  for (int64_t epoch : {0, 1}) {
    std::vector<std::vector<int64_t>> shares;
    for (int r = 0; r < 3; ++r) {
      DistributedSampler s(10, r, 3, true, 7);
      EXPECT_EQ(s.size(), 4);
      shares.push_back(s.indices(epoch));
      EXPECT_EQ(shares.back().size(), 4u);
    }
    // Reassemble the padded list: position p belongs to rank p % 3.
    std::vector<int64_t> padded(12);
    for (int64_t p = 0; p < 12; ++p) padded[p] = shares[p % 3][p / 3];
    std::vector<int64_t> head(padded.begin(), padded.begin() + 10);
    EXPECT_EQ(sorted(head), range(10));  // disjoint before padding, covering every index
    EXPECT_EQ(padded[10], padded[0]);    // padding repeats the head
    EXPECT_EQ(padded[11], padded[1]);
    EXPECT_EQ(head, RandomSampler(10, 7).indices(epoch));  // the same shuffle a single process sees
  }
  EXPECT_NE(DistributedSampler(10, 0, 3, true, 7).indices(0), DistributedSampler(10, 0, 3, true, 7).indices(1));

  std::vector<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(10, r, 3, true, 7, true);
    EXPECT_EQ(s.size(), 3);
    for (int64_t i : s.indices(0)) all.push_back(i);
  }
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 9u);
}

TEST(Sampler, DistributedRejectsBadRanks) {
  for (auto [rank, world] : std::vector<std::pair<int, int>>{{3, 3}, {-1, 3}, {0, 0}}) {
    std::string msg = message_of<ValueError>([&] { DistributedSampler(10, rank, world, false, 0); });
    EXPECT_TRUE(contains(msg, "rank " + std::to_string(rank) + " of world_size " + std::to_string(world))) << msg;
  }
}

// inputs [B, 2] = (index, 2 index) as f32, targets = the indices; throws on `bad` and sleeps
// `delay` per batch, counting calls.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t bad = -1, std::chrono::milliseconds delay = {})
      : n_(n), bad_(bad), delay_(delay) {}
  int64_t size() const override { return n_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    ++calls;
    std::this_thread::sleep_for(delay_);
    std::vector<float> inputs;
    for (int64_t i : indices) {
      WEFT_CHECK(i != bad_, ValueError, "sample ", i, " is bad");
      inputs.insert(inputs.end(), {static_cast<float>(i), 2.f * i});
    }
    int64_t b = static_cast<int64_t>(indices.size());
    return {Tensor::from_vector(inputs, {b, 2}), Tensor::from_vector(indices, {b})};
  }
  mutable std::atomic<int> calls = 0;

 private:
  int64_t n_, bad_;
  std::chrono::milliseconds delay_;
};

std::vector<std::vector<int64_t>> epoch_targets(DataLoader& loader, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  loader.start_epoch(epoch);
  while (auto batch = loader.next()) out.push_back(batch->targets.to_vector<int64_t>());
  return out;
}

TEST(DataLoader, CutsTheOrderIntoBatches) {
  auto data = std::make_shared<CountingDataset>(10);
  auto order = std::make_shared<SequentialSampler>(10);
  for (int prefetch : {0, 2}) {
    DataLoader keep(data, order, 4, false, prefetch), drop(data, order, 4, true, prefetch);
    EXPECT_EQ(keep.num_batches(), 3);
    EXPECT_EQ(drop.num_batches(), 2);
    using V = std::vector<std::vector<int64_t>>;
    EXPECT_EQ(epoch_targets(keep, 0), (V{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
    EXPECT_EQ(epoch_targets(drop, 0), (V{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    EXPECT_FALSE(keep.next());  // stays exhausted
    EXPECT_EQ(DataLoader(data, order, 5, true, prefetch).num_batches(), 2);
  }
}

TEST(DataLoader, PrefetchDoesNotChangeTheBatches) {
  Generator gen(3);
  Tensor images = Tensor::empty({37, 3, 5, 4}, DType::u8);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(gen.next_u64());
  Tensor labels = Tensor::empty({37}, DType::i64);
  for (int64_t i = 0; i < 37; ++i) labels.data<int64_t>()[i] = i % 10;
  auto data = std::make_shared<ImageDataset>(images, labels, kCifar10Normalization);
  auto order = std::make_shared<RandomSampler>(37, 9);
  DataLoader direct(data, order, 8, false, 0), prefetched(data, order, 8, false, 3);
  for (int64_t epoch : {0, 1, 2}) {
    direct.start_epoch(epoch);
    prefetched.start_epoch(epoch);
    int batches = 0;
    for (auto a = direct.next(); a; a = direct.next(), ++batches) {
      auto b = prefetched.next();
      ASSERT_TRUE(b);
      EXPECT_EQ(a->inputs.shape(), b->inputs.shape());
      EXPECT_EQ(a->inputs.to_vector<float>(), b->inputs.to_vector<float>());
      EXPECT_EQ(a->targets.to_vector<int64_t>(), b->targets.to_vector<int64_t>());
    }
    EXPECT_FALSE(prefetched.next());
    EXPECT_EQ(batches, 5);
  }
}

TEST(DataLoader, RethrowsTheDatasetsError) {
  auto data = std::make_shared<CountingDataset>(10, 5);
  for (int prefetch : {0, 1, 3}) {
    DataLoader loader(data, std::make_shared<SequentialSampler>(10), 2, false, prefetch);
    loader.start_epoch(0);
    EXPECT_TRUE(loader.next());
    EXPECT_TRUE(loader.next());
    std::string msg = message_of<ValueError>([&] { loader.next(); });  // batch {4, 5}
    EXPECT_TRUE(contains(msg, "sample 5 is bad")) << msg;
    EXPECT_FALSE(loader.next());  // the error ended the epoch
    loader.start_epoch(1);        // and the next epoch starts afresh
    EXPECT_TRUE(loader.next());
  }
}

TEST(DataLoader, DestroyingMidEpochJoinsTheWorker) {
  auto data = std::make_shared<CountingDataset>(1000, -1, std::chrono::milliseconds(2));
  auto order = std::make_shared<SequentialSampler>(1000);
  {
    DataLoader loader(data, order, 10, false, 2);
    loader.start_epoch(0);
    EXPECT_TRUE(loader.next());
  }
  int calls = data->calls;
  EXPECT_LE(calls, 4);  // one handed out, at most two queued and one in flight
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(data->calls, calls);  // nothing runs after the destructor
  {
    DataLoader loader(data, order, 10, false, 2);
    loader.start_epoch(0);
    loader.start_epoch(1);  // restarting mid-epoch stops the first worker
  }
  DataLoader never_started(data, order, 10, false, 2);
}

TEST(DataLoader, RejectsBadArguments) {
  auto data = std::make_shared<CountingDataset>(10);
  auto order = std::make_shared<SequentialSampler>(10);
  std::string msg = message_of<ValueError>([&] { DataLoader(data, order, 0, false); });
  EXPECT_TRUE(contains(msg, "batch_size >= 1, found 0")) << msg;
  message_of<ValueError>([&] { DataLoader(data, order, 4, false, -1); });
  message_of<ValueError>([&] { DataLoader(nullptr, order, 4, false); });
  DataLoader loader(data, order, 4, false);
  msg = message_of<ValueError>([&] { loader.next(); });
  EXPECT_TRUE(contains(msg, "start_epoch")) << msg;
}

}  // namespace
}  // namespace weft::data
