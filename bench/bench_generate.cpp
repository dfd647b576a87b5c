// Generation with and without the KV cache, in one run: tokens per second for the same greedy
// continuation of a 16-token prompt, once feeding one new token per step through the cache and
// once recomputing the whole sequence every step (nn/generate.h). The model is weft train's
// default GPT (4 layers, 4 heads, width 128, byte vocabulary) at context 256, seeded random
// weights: speed does not depend on their values. Times include the prompt's prefill; each figure
// is the best of three runs. bench_generate [tokens [context]] (default 200 256).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/nn/generate.h"

using namespace weft;
using Clock = std::chrono::steady_clock;

namespace {

struct Run {
  double seconds = 0;
  std::vector<int64_t> tokens;
};

Run best_of_three(nn::GPT& model, const std::vector<int64_t>& prompt, const nn::GenerateOptions& options) {
  Run best;
  for (int i = 0; i < 3; ++i) {
    const Clock::time_point start = Clock::now();
    std::vector<int64_t> tokens = nn::generate(model, prompt, options);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (i == 0 || seconds < best.seconds) best = {seconds, std::move(tokens)};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 200, context = argc > 2 ? std::atoll(argv[2]) : 256;
  manual_seed(0);
  nn::GPT model({.layers = 4, .heads = 4, .dim = 128, .context = context, .vocab = 256});
  model.eval();
  std::vector<int64_t> prompt(16);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>(97 + i);

  nn::GenerateOptions options{.max_tokens = tokens, .temperature = 0};
  const Run cached = best_of_three(model, prompt, options);
  options.use_kv_cache = false;
  const Run recomputed = best_of_three(model, prompt, options);

  std::printf("GPT %s, f32, %d threads: %lld tokens after a %zu-token prompt, greedy\n", model.extra_repr().c_str(),
              get_num_threads(), static_cast<long long>(tokens), prompt.size());
  for (auto [name, run] : {std::pair{"KV cache", cached}, std::pair{"recompute", recomputed}})
    std::printf("  %-10s %8.3f s %10.1f tokens/s\n", name, run.seconds, static_cast<double>(tokens) / run.seconds);
  std::printf("  the cache is %.1fx faster%s\n", recomputed.seconds / cached.seconds,
              cached.tokens == recomputed.tokens ? " (same tokens)" : "; THE TOKENS DIFFER");
  return cached.tokens == recomputed.tokens ? 0 : 1;
}
