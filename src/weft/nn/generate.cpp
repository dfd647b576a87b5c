#include "weft/nn/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "weft/autograd/grad_mode.h"
#include "weft/core/flag_value.h"
#include "weft/core/random.h"

namespace weft::nn {

namespace {

Tensor as_batch(const std::vector<int64_t>& ids) {
  return Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())});
}

std::vector<float> last_position(const Tensor& logits) {
  return logits.select(0, 0).select(0, logits.size(1) - 1).to_vector<float>();
}

}  // namespace

void GenerateOptions::check() const {
  if (max_tokens) check_flag("--max-tokens", *max_tokens, {.min = 0});
  check_flag("--temperature", temperature, {.min = 0});
  check_flag("--top-k", top_k, {.min = 0});
  WEFT_CHECK(vocab_limit >= 0, ValueError, "generate: vocab_limit must not be negative, got ", vocab_limit);
}

int64_t GenerateOptions::tokens_after(int64_t prompt_tokens, int64_t context) const {
  return max_tokens.value_or(std::max<int64_t>(0, context - prompt_tokens));
}

int64_t sample_token(const std::vector<float>& logits, const GenerateOptions& options, Generator& gen) {
  const int64_t vocab = options.vocab_limit > 0 ? std::min<int64_t>(options.vocab_limit, std::ssize(logits))
                                                : std::ssize(logits);
  WEFT_CHECK(vocab > 0, ValueError, "sample_token: no logits to sample from");
  // More likely first, the lower id first among equals: a total order, so top_k keeps the same
  // tokens on every machine.
  auto more_likely = [&](int64_t a, int64_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  };
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  if (options.temperature == 0) return *std::min_element(ids.begin(), ids.end(), more_likely);
  // The kept candidates are drawn from in id order: any fixed order draws each with its softmax
  // weight, and none needs the whole vocabulary sorted (the most a decode step spent per token).
  const int64_t kept = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  if (kept < vocab) {
    std::nth_element(ids.begin(), ids.begin() + kept - 1, ids.end(), more_likely);
    ids.resize(static_cast<size_t>(kept));
    std::sort(ids.begin(), ids.end());
  }

  // softmax(logits / temperature) over the kept ids, shifted by the largest for range.
  double top = -INFINITY;
  for (int64_t id : ids) top = std::max<double>(top, logits[static_cast<size_t>(id)]);
  std::vector<double> weights(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    weights[i] = std::exp((logits[static_cast<size_t>(ids[i])] - top) / options.temperature);
    total += weights[i];
  }
  double draw = gen.uniform() * total;
  for (size_t i = 0; i < ids.size(); ++i) {
    draw -= weights[i];
    if (draw < 0) return ids[i];
  }
  return ids.back();  // rounding left the draw at the very end
}

std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                              const std::function<bool(int64_t id)>& on_token) {
  options.check();
  const int64_t context = model.config.context, prompt_tokens = std::ssize(prompt);
  WEFT_CHECK(!model.is_training(), ValueError, "generate: the model is in training mode (dropout on); call eval() first");
  WEFT_CHECK(prompt_tokens > 0, ValueError, "the prompt is empty: give the model at least one token to continue");
  WEFT_CHECK(prompt_tokens <= context, ValueError, "the prompt is ", prompt_tokens,
             " tokens, longer than the model's context of ", context, " tokens: shorten it");
  const int64_t max_tokens = options.tokens_after(prompt_tokens, context);
  WEFT_CHECK(prompt_tokens + max_tokens <= context, ValueError, "the prompt's ", prompt_tokens, " tokens and ",
             max_tokens, " generated ones do not fit the model's context of ", context,
             " tokens: ask for at most --max-tokens ", context - prompt_tokens, " or shorten the prompt");
  for (int64_t id : prompt)
    WEFT_CHECK(id >= 0 && id < model.config.vocab, IndexError, "the prompt holds token id ", id,
               ", outside the model's vocabulary of ", model.config.vocab);
  if (max_tokens == 0) return {};

  NoGradGuard no_grad;
  Generator gen(options.seed);
  std::vector<int64_t> sequence = prompt;
  if (options.use_kv_cache) {
    KVCache cache = model.make_kv_cache();
    std::vector<float> logits = last_position(model(as_batch(prompt), cache));
    for (int64_t step = 0;; ++step) {
      sequence.push_back(sample_token(logits, options, gen));
      if (on_token && !on_token(sequence.back())) break;
      if (step + 1 == max_tokens) break;  // the last token needs no forward
      logits = last_position(model(as_batch({sequence.back()}), cache));
    }
  } else {
    for (int64_t step = 0; step < max_tokens; ++step) {
      sequence.push_back(sample_token(last_position(model(as_batch(sequence))), options, gen));
      if (on_token && !on_token(sequence.back())) break;
    }
  }
  return {sequence.begin() + prompt_tokens, sequence.end()};
}

}  // namespace weft::nn
