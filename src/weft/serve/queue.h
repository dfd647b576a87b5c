// The bounded queue of requests in front of each batcher (serve/batcher.h, serve/continuous.h):
// HTTP workers push, the batcher's own thread takes, and a full queue refuses at once rather than
// letting waiting requests pile up without bound.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "weft/core/error.h"

namespace weft::serve {

// The queue is full: the client should come back later (HTTP 503 with Retry-After).
class QueueFullError : public Error {
  using Error::Error;
};

// What one take() gathers.
struct Take {
  int64_t max_items = std::numeric_limits<int64_t>::max();
  int64_t max_weight = std::numeric_limits<int64_t>::max();  // the items' weights summed; the first is taken whatever its own
  double linger_ms = 0;  // how long after the oldest arrived to wait for max_weight to gather
};

template <typename T>
class RequestQueue {
 public:
  explicit RequestQueue(int64_t capacity) : capacity_(capacity) {}

  // QueueFullError when `capacity` items wait already; ValueError once closed.
  void push(T item, int64_t weight = 1) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      WEFT_CHECK(!closed_, ValueError, "the server is shutting down");
      if (static_cast<int64_t>(items_.size()) >= capacity_)
        throw QueueFullError(str("the queue is full (", capacity_, " requests waiting); try again shortly"));
      weight_ += weight;
      items_.push_back({std::move(item), weight, std::chrono::steady_clock::now()});
    }
    changed_.notify_all();
  }

  // Refuses later pushes; what waits is still taken.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    changed_.notify_all();
  }

  int64_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(items_.size());
  }

  // Waits until an item waits, busy() holds (the taker has work of its own) or the queue is
  // closed, lingers as `how` says, and takes the oldest items that fit `how`, possibly none.
  // nullopt once closed with nothing waiting and busy() false: the taker's thread may end.
  template <typename Busy>
  std::optional<std::vector<T>> take(const Take& how, Busy busy) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !items_.empty() || busy() || closed_; });
    if (items_.empty() && !busy()) return std::nullopt;
    if (!items_.empty() && how.linger_ms > 0) {
      const auto deadline = items_.front().arrived + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                         std::chrono::duration<double, std::milli>(how.linger_ms));
      changed_.wait_until(lock, deadline, [&] { return weight_ >= how.max_weight || closed_; });
    }
    std::vector<T> taken;
    int64_t weight = 0;
    while (!items_.empty() && static_cast<int64_t>(taken.size()) < how.max_items &&
           (taken.empty() || weight + items_.front().weight <= how.max_weight)) {
      weight += items_.front().weight;
      taken.push_back(std::move(items_.front().item));
      items_.pop_front();
    }
    weight_ -= weight;
    return taken;
  }

 private:
  struct Entry {
    T item;
    int64_t weight;
    std::chrono::steady_clock::time_point arrived;
  };
  const int64_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Entry> items_;
  int64_t weight_ = 0;  // of the items waiting
  bool closed_ = false;
};

}  // namespace weft::serve
