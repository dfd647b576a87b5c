// Text generation with a GPT: sampling one token after another, each conditioned on the prompt
// and on everything generated so far.
//
// generate runs the prompt through the model in one forward that fills a KVCache, then feeds one
// token per step: only the new position is computed, and it attends over the cached keys and
// values. With use_kv_cache off it recomputes the whole sequence every step instead, which gives
// the same tokens (the reference the tests and bench/bench_generate compare against) in time
// that grows with the sequence per token.
//
// Sampling. temperature 0 is greedy: the most likely token (the lowest id among equals). Otherwise
// the logits are divided by the temperature, top_k > 0 keeps the k most likely tokens (ties broken
// by the lower id, so top_k 1 is greedy), and the token is drawn from their softmax with a
// Generator seeded by `seed`: the same model, prompt and options give the same tokens.
//
// Context. The prompt and the generated tokens must fit the model's context together (wpe has one
// row per position); generate does not slide a window over a longer text.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "weft/nn/gpt.h"

namespace weft::nn {

// The defaults of `weft generate` and of the server's /v1/completions alike.
struct GenerateOptions {
  // Unset: until the context is full. weft's byte tokenizer has no end-of-text token and a GPT's
  // context is short (128 tokens by default), so the text stops where the context does; llama.cpp's
  // -n defaults the same way, where a small fixed count (Hugging Face's max_new_tokens) would cut a
  // longer context's answer short, or not fit after a long prompt.
  std::optional<int64_t> max_tokens{};  // ({}: designated initialisers may leave it out)
  double temperature = 0.8;  // 0: greedy; below 1 sharpens: a small model's rare, mostly wrong tokens come up less
  int64_t top_k = 0;         // 0: every token
  uint64_t seed = 0;
  // Sample only ids below this (a tokenizer's vocabulary, when the model's is larger); 0: the model's.
  int64_t vocab_limit = 0;
  bool use_kv_cache = true;

  // A negative count, temperature or top_k, or a non-finite temperature → ValueError naming the flag.
  void check() const;
  // max_tokens, or what a context of `context` tokens has left after the prompt.
  int64_t tokens_after(int64_t prompt_tokens, int64_t context) const;
};

// The ids that follow `prompt`. Runs under NoGradGuard. An empty prompt, a prompt
// longer than the context, a prompt and max_tokens that together exceed it → ValueError; an id
// outside the model's vocabulary → IndexError. The model must be in eval mode (dropout off).
// `on_token`, when given, is told each id as soon as it is drawn (a server streams it); returning
// false stops the generation there (the client went away), and the ids so far are returned.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                              const std::function<bool(int64_t id)>& on_token = {});

// The token the options pick from one position's logits (`gen` draws unless greedy).
int64_t sample_token(const std::vector<float>& logits, const GenerateOptions& options, Generator& gen);

}  // namespace weft::nn
