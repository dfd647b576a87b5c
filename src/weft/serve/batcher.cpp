#include "weft/serve/batcher.h"

#include <vector>

#include "weft/core/threads.h"
#include "weft/ops/shape.h"

namespace weft::serve {

DynamicBatcher::DynamicBatcher(std::function<Tensor(const Tensor&)> run, BatchOptions options,
                               std::function<void(int64_t)> on_batch)
    : run_(std::move(run)), options_(options), on_batch_(std::move(on_batch)), queue_(options.max_queue) {
  WEFT_CHECK(options_.max_batch >= 1 && options_.max_queue >= 1 && options_.max_wait_ms >= 0, ValueError,
             "batcher: max_batch and max_queue must be at least 1 and max_wait_ms not negative");
  thread_ = std::thread([this] { loop(); });
}

DynamicBatcher::~DynamicBatcher() { stop(); }

std::future<Tensor> DynamicBatcher::submit(Tensor inputs) {
  WEFT_CHECK(inputs.dim() >= 1 && inputs.size(0) >= 1, ShapeError, "batcher: a request needs at least one input");
  const int64_t n = inputs.size(0);
  Request request{std::move(inputs), {}};
  std::future<Tensor> answer = request.answer.get_future();
  queue_.push(std::move(request), n);
  return answer;
}

void DynamicBatcher::stop() {
  queue_.close();
  if (thread_.joinable()) thread_.join();
}

int64_t DynamicBatcher::queue_depth() const { return queue_.size(); }

void DynamicBatcher::loop() {
  if (options_.threads > 0) set_num_threads(options_.threads);
  // The oldest requests whose inputs fit together (the first one always).
  const Take how{.max_weight = options_.max_batch, .linger_ms = options_.max_wait_ms};
  while (std::optional<std::vector<Request>> taken = queue_.take(how, [] { return false; })) {
    std::vector<Request>& batch = *taken;
    int64_t inputs = 0;
    for (const Request& r : batch) inputs += r.inputs.size(0);
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
  }
}

}  // namespace weft::serve
