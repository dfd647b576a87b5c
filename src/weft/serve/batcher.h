// Dynamic batching for a classifier: requests wait in a queue, and the model's own thread runs
// them together, up to `max_batch` inputs or until the oldest has waited `max_wait_ms`, whichever
// comes first. One forward over 32 images costs far less than 32 forwards of one (the GEMMs get
// rows to work on, the per-op overheads are paid once), which is what batching trades a few
// milliseconds of waiting for.
//
// Why one thread owns the model: weft's kernels run on one OpenMP pool whose size is a per-thread
// setting (core/threads.h), oneDNN's primitives and their cache are built for the thread that
// runs them, and the model's forward allocates from the caching allocator as it goes. Two HTTP
// workers calling the model at once would split the cores between two half-sized forwards, each
// slower than one whole one, and the per-thread settings would depend on which worker the
// connection landed on. So HTTP workers only parse, queue and wait; the batcher's thread sets the
// thread count once and does all of the computing.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <thread>

#include "weft/core/tensor.h"
#include "weft/serve/queue.h"

namespace weft::serve {

struct BatchOptions {
  int64_t max_batch = 32;     // inputs run together at most (a request with more runs alone)
  double max_wait_ms = 5;     // how long the oldest request waits for others to join it
  int64_t max_queue = 256;    // requests waiting at most; more → QueueFullError
  int threads = 0;            // the inference thread's OpenMP threads; 0: weft's default
};

class DynamicBatcher {
 public:
  // `run` maps a batch of inputs [n, ...] to outputs [n, ...] (row i for input i), on the batcher's
  // thread; `on_batch(n)` is told the size of each batch run.
  DynamicBatcher(std::function<Tensor(const Tensor&)> run, BatchOptions options,
                 std::function<void(int64_t)> on_batch = {});
  ~DynamicBatcher();  // stop()
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Queues `inputs` [n, ...] (n >= 1); the future holds their rows of the output, or the error
  // the batch's run threw. QueueFullError when max_queue requests are waiting; ValueError once
  // stopping.
  std::future<Tensor> submit(Tensor inputs);
  // Runs what is queued, then ends the thread; later submits are refused.
  void stop();
  int64_t queue_depth() const;

 private:
  struct Request {
    Tensor inputs;
    std::promise<Tensor> answer;
  };
  void loop();

  std::function<Tensor(const Tensor&)> run_;
  BatchOptions options_;
  std::function<void(int64_t)> on_batch_;
  RequestQueue<Request> queue_;  // weighed by inputs
  std::thread thread_;
};

}  // namespace weft::serve
