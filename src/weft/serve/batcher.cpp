#include "weft/serve/batcher.h"

#include <vector>

#include "weft/core/threads.h"
#include "weft/ops/shape.h"

namespace weft::serve {

DynamicBatcher::DynamicBatcher(std::function<Tensor(const Tensor&)> run, BatchOptions options,
                               std::function<void(int64_t)> on_batch)
    : run_(std::move(run)), options_(options), on_batch_(std::move(on_batch)) {
  WEFT_CHECK(options_.max_batch >= 1 && options_.max_queue >= 1 && options_.max_wait_ms >= 0, ValueError,
             "batcher: max_batch and max_queue must be at least 1 and max_wait_ms not negative");
  thread_ = std::thread([this] { loop(); });
}

DynamicBatcher::~DynamicBatcher() { stop(); }

std::future<Tensor> DynamicBatcher::submit(Tensor inputs) {
  WEFT_CHECK(inputs.dim() >= 1 && inputs.size(0) >= 1, ShapeError, "batcher: a request needs at least one input");
  std::unique_lock<std::mutex> lock(mutex_);
  WEFT_CHECK(!stopping_, ValueError, "the server is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue)
    throw QueueFullError(str("the queue is full (", options_.max_queue, " requests waiting); try again shortly"));
  queued_inputs_ += inputs.size(0);
  queue_.push_back({std::move(inputs), {}, std::chrono::steady_clock::now()});
  std::future<Tensor> answer = queue_.back().answer.get_future();
  lock.unlock();
  changed_.notify_all();
  return answer;
}

void DynamicBatcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t DynamicBatcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

void DynamicBatcher::loop() {
  if (options_.threads > 0) set_num_threads(options_.threads);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and nothing left to answer
    const auto deadline = queue_.front().arrived + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double, std::milli>(options_.max_wait_ms));
    changed_.wait_until(lock, deadline, [&] { return queued_inputs_ >= options_.max_batch || stopping_; });
    // The oldest requests whose inputs fit together (the first one always).
    std::vector<Request> batch;
    int64_t inputs = 0;
    while (!queue_.empty() && (batch.empty() || inputs + queue_.front().inputs.size(0) <= options_.max_batch)) {
      inputs += queue_.front().inputs.size(0);
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    queued_inputs_ -= inputs;
    lock.unlock();
    std::vector<Tensor> answers;
    try {
      std::vector<Tensor> parts;
      for (const Request& r : batch) parts.push_back(r.inputs);
      const Tensor outputs = run_(parts.size() == 1 ? parts[0] : cat(parts, 0));
      WEFT_CHECK(outputs.size(0) == inputs, ShapeError, "batcher: the model answered ", outputs.size(0), " rows for ",
                 inputs, " inputs");
      if (on_batch_) on_batch_(inputs);
      int64_t row = 0;
      for (const Request& r : batch) {
        answers.push_back(outputs.narrow(0, row, r.inputs.size(0)).clone());
        row += r.inputs.size(0);
      }
    } catch (...) {
      for (Request& r : batch) r.answer.set_exception(std::current_exception());
      answers.clear();
    }
    for (size_t i = 0; i < answers.size(); ++i) batch[i].answer.set_value(std::move(answers[i]));
    lock.lock();
  }
}

}  // namespace weft::serve
