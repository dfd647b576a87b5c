// Continuous batching for a GPT (as Orca and vLLM schedule generation): the sequences being
// generated are decoded together, one token each per step, and a new request joins the running
// batch between two steps instead of waiting for the batch to finish. Each sequence keeps its own
// KV cache (nn::KVCaches), so one that finishes leaves at once and frees its rows, and the others
// go on without a pause.
//
// One step: the requests waiting are admitted, up to `max_batch` sequences in all, each with a
// forward over its prompt (prefill) that draws its first token; then one forward over every
// running sequence's last token (GPT::forward with KVCaches: the layers' GEMMs take all the rows
// at once, and attention one decode_attention call over the sequences' slots of one KV cache,
// allocated at the start for max_batch sequences of the whole context) draws each one's next. A sequence draws its tokens as
// nn::generate would, with its own options and its own Generator seeded by its seed, so a request
// alone gets generate's tokens exactly; in company, the same to the rounding of a GEMM over more
// rows. The model's thread is the batcher's own (serve/batcher.h says why).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "weft/nn/generate.h"
#include "weft/nn/kv_cache.h"
#include "weft/serve/batcher.h"

namespace weft::serve {

struct Generation {
  std::vector<int64_t> prompt;  // non-empty, fitting the context with options.tokens_after(it)
  nn::GenerateOptions options;
  std::function<bool(int64_t id)> on_token;  // each token as drawn; false: stop here (the client left)
  std::function<void(const std::string& error)> on_done;  // once, at the end ("" when no error)
};

class ContinuousBatcher {
 public:
  // `on_step(n)` is told the number of sequences each decode step ran together.
  ContinuousBatcher(nn::GPT& model, BatchOptions options, std::function<void(int64_t)> on_step = {});
  ~ContinuousBatcher();  // stop()
  ContinuousBatcher(const ContinuousBatcher&) = delete;
  ContinuousBatcher& operator=(const ContinuousBatcher&) = delete;

  // Queues a generation; QueueFullError when max_queue wait to be admitted; ValueError once stopping.
  void submit(Generation generation);
  // Finishes every generation queued or running, then ends the thread.
  void stop();
  int64_t queue_depth() const;

 private:
  struct Running;
  void loop();

  nn::GPT& model_;
  BatchOptions options_;
  std::function<void(int64_t)> on_step_;
  RequestQueue<Generation> waiting_;
  // Every running sequence's keys and values, a slot each, allocated once, before the thread: a
  // cache the memory cannot hold is the constructor's error, not the thread's.
  std::unique_ptr<nn::KVCache> shared_cache_;
  std::thread thread_;
};

}  // namespace weft::serve
