#include "weft/data/dataloader.h"

#include <algorithm>
#include <utility>

namespace weft::data {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Sampler> sampler,
                       int64_t batch_size, bool drop_last, int prefetch_batches)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  WEFT_CHECK(dataset_ && sampler_, ValueError, "DataLoader: expected a dataset and a sampler, found null");
  WEFT_CHECK(batch_size >= 1, ValueError, "DataLoader: expected batch_size >= 1, found ", batch_size);
  WEFT_CHECK(prefetch_batches >= 0, ValueError, "DataLoader: expected prefetch_batches >= 0, found ", prefetch_batches);
  prefetch_ = static_cast<size_t>(prefetch_batches);
}

DataLoader::~DataLoader() { stop(); }

int64_t DataLoader::num_batches() const {
  int64_t n = sampler_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  WEFT_CHECK(first_batch >= 0 && first_batch <= num_batches(), ValueError, "DataLoader: expected a first batch in [0, ",
             num_batches(), "], found ", first_batch);
  stop();
  started_ = false;
  order_ = sampler_->indices(epoch);
  WEFT_CHECK(static_cast<int64_t>(order_.size()) == sampler_->size(), ValueError, "DataLoader: expected the sampler's ",
             sampler_->size(), " indices for epoch ", epoch, ", found ", order_.size());
  handed_out_ = first_batch;
  started_ = true;
  if (prefetch_ > 0) worker_ = std::thread(&DataLoader::work, this, first_batch);
}

std::optional<Batch> DataLoader::next() {
  WEFT_CHECK(started_, ValueError, "DataLoader: expected start_epoch(epoch) before next()");
  if (handed_out_ == num_batches()) return std::nullopt;
  if (prefetch_ == 0) {
    try {
      return build(handed_out_++);
    } catch (...) {
      handed_out_ = num_batches();
      throw;
    }
  }
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty()) {
    handed_out_ = num_batches();
    std::rethrow_exception(std::exchange(error_, nullptr));
  }
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  ++handed_out_;
  lock.unlock();
  changed_.notify_all();
  return batch;
}

Batch DataLoader::build(int64_t batch) const {
  auto begin = order_.begin() + batch * batch_size_;
  auto end = begin + std::min<int64_t>(batch_size_, order_.end() - begin);
  return dataset_->get_batch(std::vector<int64_t>(begin, end));
}

void DataLoader::work(int64_t first_batch) {
  for (int64_t b = first_batch; b < num_batches(); ++b) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || ready_.size() < prefetch_; });
      if (stopping_) return;
    }
    try {
      Batch batch = build(b);
      std::lock_guard lock(mutex_);
      ready_.push_back(std::move(batch));
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
      }
      changed_.notify_all();
      return;
    }
    changed_.notify_all();
  }
}

void DataLoader::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
  ready_.clear();
  error_ = nullptr;
  stopping_ = false;
}

}  // namespace weft::data
