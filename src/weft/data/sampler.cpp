#include "weft/data/sampler.h"

#include <numeric>
#include <utility>

#include "weft/core/error.h"
#include "weft/core/random.h"

namespace weft::data {
namespace {

int64_t checked_size(int64_t size, const char* who) {
  WEFT_CHECK(size >= 0, ValueError, who, ": expected a dataset size >= 0, found ", size);
  return size;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> out(n);
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

Generator epoch_generator(uint64_t seed, int64_t epoch) {
  // The odd multiplier keeps (seed, epoch) and (seed + 1, epoch - 1) apart, unlike seed + epoch.
  return Generator(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
}

// Lemire's multiply-shift maps 64 random bits onto [0, n); its bias (n / 2^64) is negligible.
int64_t below(Generator& gen, int64_t n) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(gen.next_u64()) * n) >> 64);
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  Generator gen = epoch_generator(seed, epoch);
  std::vector<int64_t> out = iota(n);
  for (int64_t i = n - 1; i > 0; --i) std::swap(out[i], out[below(gen, i + 1)]);
  return out;
}

}  // namespace

SequentialSampler::SequentialSampler(int64_t size) : size_(checked_size(size, "SequentialSampler")) {}

std::vector<int64_t> SequentialSampler::indices(int64_t) const { return iota(size_); }

RandomSampler::RandomSampler(int64_t size, uint64_t seed) : size_(checked_size(size, "RandomSampler")), seed_(seed) {}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const { return permutation(size_, seed_, epoch); }

ReplacementSampler::ReplacementSampler(int64_t population, int64_t num_samples, uint64_t seed)
    : population_(population), num_samples_(num_samples), seed_(seed) {
  WEFT_CHECK(num_samples >= 0 && (population >= 1 || num_samples == 0), ValueError,
             "ReplacementSampler: expected num_samples >= 0 drawn from a population >= 1, found ", num_samples,
             " from ", population);
}

std::vector<int64_t> ReplacementSampler::indices(int64_t epoch) const {
  Generator gen = epoch_generator(seed_, epoch);
  std::vector<int64_t> out(num_samples_);
  for (int64_t& index : out) index = below(gen, population_);
  return out;
}

DistributedSampler::DistributedSampler(int64_t size, int rank, int world_size, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : dataset_size_(checked_size(size, "DistributedSampler")),
      rank_(rank),
      world_size_(world_size),
      shuffle_(shuffle),
      seed_(seed) {
  WEFT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ValueError,
             "DistributedSampler: expected world_size >= 1 and 0 <= rank < world_size, found rank ", rank,
             " of world_size ", world_size);
  per_rank_ = drop_last ? size / world_size : (size + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all = shuffle_ ? permutation(dataset_size_, seed_, epoch) : iota(dataset_size_);
  std::vector<int64_t> mine(per_rank_);
  // Position p of the padded list is all[p % dataset_size]: padding repeats the head.
  for (int64_t i = 0; i < per_rank_; ++i) mine[i] = all[(rank_ + i * world_size_) % dataset_size_];
  return mine;
}

BatchSliceSampler::BatchSliceSampler(std::shared_ptr<const Sampler> global, int64_t global_batch, int rank, int world)
    : global_(std::move(global)), global_batch_(global_batch), rank_(rank), world_(world), size_(0) {
  WEFT_CHECK(world >= 1 && rank >= 0 && rank < world, ValueError, "BatchSliceSampler: rank ", rank,
             " is not in a world of ", world);
  WEFT_CHECK(global_batch >= 1 && global_batch % world == 0, ValueError, "BatchSliceSampler: a batch of ", global_batch,
             " does not split evenly over ", world, " ranks");
  for (int64_t start = 0; start < global_->size(); start += global_batch_) {
    const int64_t length = std::min(global_batch_, global_->size() - start);
    size_ += length * (rank_ + 1) / world_ - length * rank_ / world_;
  }
}

std::vector<int64_t> BatchSliceSampler::indices(int64_t epoch) const {
  const std::vector<int64_t> all = global_->indices(epoch);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(size_));
  for (int64_t start = 0; start < static_cast<int64_t>(all.size()); start += global_batch_) {
    const int64_t length = std::min<int64_t>(global_batch_, static_cast<int64_t>(all.size()) - start);
    mine.insert(mine.end(), all.begin() + start + length * rank_ / world_, all.begin() + start + length * (rank_ + 1) / world_);
  }
  return mine;
}

}  // namespace weft::data
