// Samplers: the order in which a DataLoader visits a dataset's samples, epoch by epoch.
//
// indices(epoch) returns size() sample numbers and depends only on the sampler's arguments and
// the epoch (never on global RNG state or on earlier calls), so a resumed run and every rank of
// a distributed run see exactly the order an uninterrupted single run would.
//
// Shuffles are Fisher–Yates driven by a weft::Generator seeded from (seed, epoch).
// DistributedSampler follows torch.utils.data.DistributedSampler: every rank shuffles the full
// list identically, pads it by repeating its head until world_size divides it (or drops the
// tail with drop_last), and rank r takes positions r, r + world_size, r + 2 world_size, … So
// every rank has the same number of batches (collectives stay in step), and before padding the
// ranks' shares are disjoint and together cover the dataset.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace weft::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  virtual int64_t size() const = 0;
};

// 0, 1, …, size-1 every epoch. Negative size → ValueError (as for the samplers below).
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return size_; }

 private:
  int64_t size_;
};

// A permutation of 0..size-1, a different one each epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t size, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return size_; }

 private:
  int64_t size_;
  uint64_t seed_;
};

// num_samples indices drawn independently and uniformly from [0, population), a fresh draw each
// epoch (torch's RandomSampler with replacement=True). For data sets whose samples overlap, such
// as every window of a token stream, where an epoch of each sample once would be both huge and
// pointless. population < 1 with num_samples > 0 → ValueError.
class ReplacementSampler : public Sampler {
 public:
  ReplacementSampler(int64_t population, int64_t num_samples, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }

 private:
  int64_t population_;
  int64_t num_samples_;
  uint64_t seed_;
};

class DistributedSampler : public Sampler {
 public:
  // `size` is the dataset's; a rank outside [0, world_size) or world_size < 1 → ValueError.
  DistributedSampler(int64_t size, int rank, int world_size, bool shuffle, uint64_t seed, bool drop_last = false);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return per_rank_; }  // this rank's share

 private:
  int64_t dataset_size_;
  int rank_;
  int world_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t per_rank_;
};

// Rank `rank` of `world`'s share of the batches `global` gives: of each run of `global_batch`
// indices (an epoch's last run may be shorter), the rank-th of `world` slices as equal as they cut.
// The ranks' batch k together are the one-process batch k, and no index is any two ranks'. For
// samplers that draw with replacement (a language model's windows), where DistributedSampler's
// interleaving of one permutation has nothing to interleave. global_batch not a multiple of world,
// or a rank outside [0, world) → ValueError.
class BatchSliceSampler : public Sampler {
 public:
  BatchSliceSampler(std::shared_ptr<const Sampler> global, int64_t global_batch, int rank, int world);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return size_; }

 private:
  std::shared_ptr<const Sampler> global_;
  int64_t global_batch_;
  int rank_, world_;
  int64_t size_;
};

}  // namespace weft::data
