// DataLoader: cuts a sampler's order into batches of a dataset, one epoch at a time.
//
// start_epoch(e) fixes the epoch's order (sampler->indices(e)); next() then returns batches
// 0, 1, …, num_batches() - 1 and std::nullopt after the last. start_epoch(e, b) starts at batch b
// instead (a run resumed mid-epoch), building none of the ones before. Batch b holds the samples at
// positions [b * batch_size, (b + 1) * batch_size) of the order; the last one is shorter unless
// drop_last drops it.
//
// With prefetch_batches > 0 a worker thread builds up to that many batches ahead while the
// caller trains; with 0 next() builds each on the caller's thread. The batches are identical
// either way. An exception from the dataset surfaces from the next() that would have returned
// that batch and ends the epoch. start_epoch during an epoch and the destructor stop and join
// the worker (after at most the one batch it is building).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "weft/data/dataset.h"
#include "weft/data/sampler.h"

namespace weft::data {

class DataLoader {
 public:
  // batch_size < 1, prefetch_batches < 0 or a null dataset or sampler → ValueError.
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Sampler> sampler, int64_t batch_size,
             bool drop_last, int prefetch_batches = 2);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_batches() const;
  void start_epoch(int64_t epoch, int64_t first_batch = 0);  // first_batch outside [0, num_batches()] → ValueError
  std::optional<Batch> next();  // before any start_epoch → ValueError

 private:
  Batch build(int64_t batch) const;
  void work(int64_t first_batch);
  void stop();

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
  size_t prefetch_;
  bool started_ = false;
  std::vector<int64_t> order_;  // written only while no worker runs
  int64_t handed_out_ = 0;      // batches next() has returned this epoch

  std::thread worker_;
  std::mutex mutex_;  // guards the fields below
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stopping_ = false;
};

}  // namespace weft::data
