#include "weft/serve/continuous.h"

#include <algorithm>
#include <memory>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/core/allocator.h"
#include "weft/core/threads.h"
#include "weft/io/input_file.h"

namespace weft::serve {

namespace {

// The logits of row `row`'s last position in [B, T, vocab].
std::vector<float> last_logits(const Tensor& logits, int64_t row) {
  return logits.select(0, row).select(0, logits.size(1) - 1).to_vector<float>();
}

}  // namespace

struct ContinuousBatcher::Running {
  Generation request;
  nn::KVCache cache;      // a slot of the batcher's shared cache
  Generator generator;
  int64_t last = 0;       // the token drawn last: the next step's input
  int64_t produced = 0;
};

ContinuousBatcher::ContinuousBatcher(nn::GPT& model, BatchOptions options, std::function<void(int64_t)> on_step)
    : model_(model), options_(options), on_step_(std::move(on_step)), waiting_(options.max_queue) {
  WEFT_CHECK(options_.max_batch >= 1 && options_.max_queue >= 1, ValueError,
             "continuous batcher: max_batch and max_queue must be at least 1");
  // The KV cache is allocated whole when the thread starts: one the machine (or the allocator's
  // WEFT_MEMORY_LIMIT) cannot hold is refused here, before the server says it is serving. Counted
  // in doubles, which no flag overflows.
  const nn::GPTConfig& c = model_.config;
  const double element = static_cast<double>(dtype_size(model_.parameters().front().dtype()));
  const double per_sequence = 2.0 * static_cast<double>(c.layers) * static_cast<double>(c.context) *
                              static_cast<double>(c.dim) * element;
  const int64_t physical = static_cast<int64_t>(std::min<uint64_t>(io::usable_memory_bytes(), INT64_MAX)),
                limit = CachingAllocator::cpu().memory_limit();
  const bool limited = limit > 0 && limit < physical;
  const double memory = static_cast<double>(limited ? limit : physical),
               cache = per_sequence * static_cast<double>(options_.max_batch);
  WEFT_CHECK(cache <= memory, ValueError, "--max-batch: ", options_.max_batch, " sequences of this GPT's ", c.context,
             "-token context need a KV cache of ", format_bytes(static_cast<int64_t>(std::min(cache, 9e18))),
             " (keys and values of ", c.layers, " layers of width ", c.dim, ", ", element, " bytes each), more than ",
             limited ? "the memory limit of " : "this machine's ", format_bytes(static_cast<int64_t>(memory)),
             limited ? " (WEFT_MEMORY_LIMIT)" : " of memory", "; at most ", static_cast<int64_t>(memory / per_sequence),
             " fit");
  shared_cache_ = std::make_unique<nn::KVCache>(model_.make_kv_cache(options_.max_batch));
  thread_ = std::thread([this] { loop(); });
}

ContinuousBatcher::~ContinuousBatcher() { stop(); }

void ContinuousBatcher::submit(Generation generation) {
  generation.options.max_tokens =
      generation.options.tokens_after(std::ssize(generation.prompt), model_.config.context);
  waiting_.push(std::move(generation));
}

void ContinuousBatcher::stop() {
  waiting_.close();
  if (thread_.joinable()) thread_.join();
}

int64_t ContinuousBatcher::queue_depth() const { return waiting_.size(); }

void ContinuousBatcher::loop() {
  if (options_.threads > 0) set_num_threads(options_.threads);
  NoGradGuard no_grad;
  // decode_attention reads every running sequence's keys and values in one call per layer.
  const nn::KVCache& shared = *shared_cache_;
  std::vector<int64_t> free_slots;
  for (int64_t s = options_.max_batch - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<std::unique_ptr<Running>> running;
  auto finish = [&](Running& r, const std::string& error) {
    free_slots.push_back(r.cache.slot_index());
    r.request.on_done(error);
  };
  // Tells a sequence its token; true while it goes on.
  auto draw = [](Running& r, const std::vector<float>& logits) {
    r.last = nn::sample_token(logits, r.request.options, r.generator);
    ++r.produced;
    const bool wanted = !r.request.on_token || r.request.on_token(r.last);
    return wanted && r.produced < *r.request.options.max_tokens;
  };
  // Until stopped with nothing waiting or running: the waiting requests that the running batch has
  // room for join it.
  while (std::optional<std::vector<Generation>> admitted =
             waiting_.take({.max_items = options_.max_batch - std::ssize(running)}, [&] { return !running.empty(); })) {
    for (Generation& g : *admitted) {  // prefill: the prompt in one forward, and the first token
      const std::function<void(const std::string&)> on_done = g.on_done;
      try {
        if (*g.options.max_tokens == 0) {
          on_done("");
          continue;
        }
        auto r = std::make_unique<Running>(Running{std::move(g), shared.slot(free_slots.back()), Generator(0), 0, 0});
        free_slots.pop_back();
        r->generator = Generator(r->request.options.seed);
        const Tensor prompt = Tensor::from_vector(r->request.prompt, {1, static_cast<int64_t>(r->request.prompt.size())});
        std::vector<float> logits;
        try {
          logits = last_logits(model_(prompt, r->cache), 0);
        } catch (...) {
          free_slots.push_back(r->cache.slot_index());
          throw;
        }
        if (draw(*r, logits))
          running.push_back(std::move(r));
        else
          finish(*r, "");
      } catch (const std::exception& e) {
        on_done(e.what());
      }
    }
    if (running.empty()) continue;
    // The decode step: every running sequence's last token at once.
    const int64_t batch = static_cast<int64_t>(running.size());
    try {
      std::vector<int64_t> tokens;
      nn::KVCaches caches;
      for (const auto& r : running) {
        tokens.push_back(r->last);
        caches.push_back(&r->cache);
      }
      const Tensor logits = model_(Tensor::from_vector(tokens, {batch, 1}), caches);
      if (on_step_) on_step_(batch);
      // Every row's logits [B, 1, vocab] read out at once, then cut per sequence.
      const std::vector<float> all = logits.contiguous().to_vector<float>();
      const auto vocab = static_cast<size_t>(logits.size(2));
      std::vector<std::unique_ptr<Running>> going_on;
      for (int64_t b = 0; b < batch; ++b) {
        Running& r = *running[static_cast<size_t>(b)];
        const auto row = all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b) * vocab);
        if (draw(r, std::vector<float>(row, row + static_cast<std::ptrdiff_t>(vocab))))
          going_on.push_back(std::move(running[static_cast<size_t>(b)]));
        else
          finish(r, "");
      }
      running = std::move(going_on);
    } catch (const std::exception& e) {
      for (auto& r : running) finish(*r, e.what());
      running.clear();
    }
  }
}

}  // namespace weft::serve
