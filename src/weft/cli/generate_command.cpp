// `weft generate`: text from a GPT checkpoint of `weft train --model gpt` (src/weft/nn/generate.h).
#include <chrono>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/threads.h"
#include "weft/infer/load.h"
#include "weft/nn/generate.h"
#include "weft/train/options.h"

namespace weft::cli {

namespace {

struct GenerateFlags {
  std::string checkpoint, prompt, tokenizer;
  nn::GenerateOptions options;
  int threads = 0;
  bool json = false;
};

void generate_text(GenerateFlags f) {
  WEFT_CHECK(!f.prompt.empty(), ValueError, "--prompt: must not be empty: give the model some text to continue");
  if (f.threads > 0) set_num_threads(f.threads);
  infer::LoadedModel loaded = infer::load_model(f.checkpoint, {.tokenizer = f.tokenizer});
  WEFT_CHECK(loaded.kind == nn::ModelKind::gpt, ValueError, f.checkpoint, " holds an image classifier (",
             nn::model_kind_name(loaded.kind),
             "), not a GPT; weft generate continues text with a checkpoint of weft train --model gpt");
  const data::Tokenizer& tokenizer = *loaded.tokenizer;
  const std::vector<int32_t> encoded = tokenizer.encode(f.prompt);
  std::vector<int64_t> ids(encoded.begin(), encoded.end());
  const int64_t prompt_tokens = std::ssize(ids), context = loaded.gpt->config.context;
  // A model trained with a larger --vocab than its tokenizer's has ids no text decodes to.
  f.options.vocab_limit = tokenizer.vocab_size();

  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> generated = nn::generate(*loaded.gpt, ids, f.options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t generated_tokens = std::ssize(generated);
  const double tokens_per_s = generated_tokens > 0 ? static_cast<double>(generated_tokens) / seconds : 0;

  ids.insert(ids.end(), generated.begin(), generated.end());
  const std::string text = tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.end()));
  std::cout << text << (text.ends_with('\n') ? "" : "\n") << "\n"
            << generated_tokens << " tokens after a prompt of " << prompt_tokens << " in " << seconds << " s: "
            << static_cast<int64_t>(tokens_per_s) << " tokens/s (context " << context << ", KV cache)\n";
  if (f.json)
    std::cout << nlohmann::json{{"text", text}, {"prompt_tokens", prompt_tokens}, {"generated_tokens", generated_tokens},
                                {"tokens_per_s", tokens_per_s}, {"generate_s", seconds},
                                {"temperature", f.options.temperature}, {"top_k", f.options.top_k},
                                {"seed", f.options.seed}, {"context", context},
                                {"tokenizer", tokenizer.identity()}}.dump(-1, ' ', false,
                                                                          nlohmann::json::error_handler_t::replace)
              << "\n";
}

}  // namespace

void add_generate_command(CLI::App& app, std::function<void()>& run) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* g = app.add_subcommand("generate", "continue a prompt with a GPT checkpoint (weft train --model gpt --out D)");
  g->add_option("--checkpoint", f->checkpoint, "the directory weft train --out wrote, or its model.safetensors")
      ->required()->check(not_empty());
  g->add_option("--prompt", f->prompt, "the text to continue")->required();
  number_flag(
      g, "--max-tokens", f->options.max_tokens,
      "tokens to generate; the prompt and these must fit the model's context (default: all that fit)", {.min = 0});
  number_flag(g, "--temperature", f->options.temperature, "0: greedy (always the most likely token)", {.min = 0});
  number_flag(g, "--top-k", f->options.top_k, "sample among the K most likely tokens (0: all)", {.min = 0});
  number_flag(g, "--seed", f->options.seed, "the same seed gives the same text");
  g->add_option("--tokenizer", f->tokenizer,
                "byte, a SentencePiece model or a directory of GPT-2's vocab.json and merges.txt; must be the "
                "checkpoint's (default: the one saved with it)")
      ->check(not_empty());
  number_flag(g, "--threads", f->threads, "0: all cores (or OMP_NUM_THREADS)", {.min = 0, .max = train::kMaxThreads});
  g->add_flag("--json", f->json, "print the result as one JSON object on the last line");
  g->callback([&run, f] {
    f->options.check();
    run = [f] { generate_text(*f); };
  });
}

}  // namespace weft::cli
