#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <tuple>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/program.h"
#include "weft/data/text.h"
#include "weft/infer/metadata.h"
#include "weft/io/atomic_file.h"

namespace weft::cli {

namespace {

struct Corpus {
  std::vector<std::string> files;
  std::vector<std::string> documents;
  std::vector<std::string> names;  // "FILE, document K" for each document
  int64_t bytes = 0;
};

Corpus read_corpus(const std::vector<std::string>& paths, const std::string& separator) {
  Corpus corpus;
  corpus.files = data::expand_text_paths(paths.empty() ? std::vector<std::string>{data::kFortunesDir} : paths);
  for (const std::string& file : corpus.files) {
    io::mark_as_input(file);
    int64_t k = 0;
    for (std::string& document : data::read_text_documents(file, separator)) {
      corpus.bytes += static_cast<int64_t>(document.size());
      corpus.documents.push_back(std::move(document));
      corpus.names.push_back(str(file, ", document ", ++k));
    }
  }
  return corpus;
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

void train_tokenizer(const std::vector<std::string>& paths, const data::SentencePieceOptions& options,
                     const std::string& separator, const std::string& out, bool json) {
  Corpus corpus = read_corpus(paths, separator);
  check_output_file("--out", out);
  auto start = std::chrono::steady_clock::now();
  data::SentencePieceTokenizer tokenizer = data::train_sentencepiece(corpus.documents, options, corpus.names);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  io::write_file_atomic(out, [&](std::FILE* f) {
    std::fwrite(tokenizer.serialized_model().data(), 1, tokenizer.serialized_model().size(), f);
  });
  int64_t tokens = 0;
  for (const std::string& document : corpus.documents) tokens += static_cast<int64_t>(tokenizer.encode(document).size());
  double bytes_per_token = static_cast<double>(corpus.bytes) / static_cast<double>(tokens);
  std::cout << "trained a " << options.model_type << " tokenizer of " << tokenizer.vocab_size() << " pieces on "
            << corpus.documents.size() << " documents (" << corpus.bytes << " bytes, " << corpus.files.size()
            << " files) in " << fixed(seconds, 1) << " s\n"
            << "it encodes them as " << tokens << " tokens, " << fixed(bytes_per_token, 2) << " bytes per token\n"
            << out << ": " << tokenizer.identity() << "\n";
  if (json)
    std::cout << nlohmann::json{{"model_type", options.model_type}, {"vocab_size", tokenizer.vocab_size()},
                                {"documents", corpus.documents.size()}, {"bytes", corpus.bytes}, {"tokens", tokens},
                                {"bytes_per_token", bytes_per_token}, {"train_s", seconds}, {"out", out},
                                {"tokenizer", tokenizer.identity()}}.dump()
              << "\n";
}

void encode_text(const std::vector<std::string>& paths, const std::string& tokenizer_spec, double val_fraction,
                 const std::string& separator, const std::string& out_dir, bool json) {
  std::unique_ptr<data::Tokenizer> tokenizer = data::load_tokenizer(tokenizer_spec);
  Corpus corpus = read_corpus(paths, separator);
  data::ShardSplit split = data::tokenize_split(corpus.documents, val_fraction, *tokenizer, separator);
  WEFT_CHECK(val_fraction == 0 || !split.val.tokens.empty(), ValueError, "a validation fraction of ", val_fraction,
             " of ", split.train.tokens.size(), " tokens is no token: give more text, or --val-fraction 0");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  WEFT_CHECK(!ec, IOError, "cannot create directory '", out_dir, "': ", ec.message());
  for (const char* shard : {"/train.bin", "/val.bin"}) check_output_file("--out", out_dir + shard);
  // Beside the shards, so that weft train --data OUT_DIR finds the tokenizer that made them.
  infer::save_tokenizer(*tokenizer, out_dir);
  nlohmann::json result = {{"tokenizer", tokenizer->identity()}, {"vocab_size", tokenizer->vocab_size()},
                           {"split", split.by_tokens ? "tokens" : "documents"}};
  std::cout << "tokenizer " << tokenizer->identity() << " (vocab " << tokenizer->vocab_size() << "), "
            << corpus.files.size() << " files\n";
  const auto document_count = static_cast<int64_t>(corpus.documents.size());
  const auto val_documents = static_cast<int64_t>(std::floor(static_cast<double>(document_count) * val_fraction));
  if (split.by_tokens)
    std::cout << corpus.documents.size() << (corpus.documents.size() == 1 ? " document is" : " documents are")
              << " too few to hold out whole ones: val.bin is the last " << val_fraction * 100 << "% of the tokens\n";
  for (auto [name, shard, documents] :
       {std::tuple{"train", &split.train, document_count - val_documents},
        std::tuple{"val", &split.val, val_documents}}) {
    std::string path = out_dir + "/" + name + ".bin";
    data::write_token_shard(path, *shard);
    // The bytes the shard decodes to: its documents and the separator line after each.
    std::vector<int32_t> ids(shard->tokens.begin(), shard->tokens.end());
    auto bytes = static_cast<int64_t>(tokenizer->decode(ids).size());
    auto tokens = static_cast<int64_t>(ids.size());
    double bytes_per_token = tokens ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0;
    std::cout << name << ": " << (split.by_tokens ? "" : str(documents, " documents, ")) << bytes << " bytes -> "
              << tokens << " tokens (" << fixed(bytes_per_token, 2) << " bytes per token) in " << path << "\n";
    result[name] = {{"bytes", bytes}, {"tokens", tokens}, {"bytes_per_token", bytes_per_token}, {"path", path}};
    if (!split.by_tokens) result[name]["documents"] = documents;
  }
  std::cout << "train on them: " << shell_quote(program_name()) << " train --model gpt --data " << shell_quote(out_dir)
            << "\n";
  if (json) std::cout << result.dump() << "\n";
}

}  // namespace

void add_tokenize_commands(CLI::App& app, std::function<void()>& run) {
  CLI::App* tokenize = app.add_subcommand("tokenize", "train tokenizers and turn text into token shards");
  tokenize->require_subcommand(1);
  auto paths = std::make_shared<std::vector<std::string>>();
  auto separator = std::make_shared<std::string>("%");
  auto json = std::make_shared<bool>(false);
  const std::string text_help = "text files, or directories of them (default: the fortunes, " +
                                std::string(data::kFortunesDir) + ")";
  const std::string separator_help = "a line holding only this separates documents";

  auto options = std::make_shared<data::SentencePieceOptions>();
  auto model_out = std::make_shared<std::string>();
  CLI::App* t = tokenize->add_subcommand("train", "train a SentencePiece BPE or unigram tokenizer");
  t->add_option("text", *paths, text_help);
  number_flag(t, "--vocab", options->vocab_size, "vocabulary size, byte-fallback pieces included",
              {.min = 1, .max = int64_t{1} << 20});
  t->add_option("--type", options->model_type, "bpe | unigram")->check(one_of({"bpe", "unigram"}))->capture_default_str();
  t->add_option("--separator", *separator, separator_help)->capture_default_str();
  t->add_option("--out", *model_out, "the model file to write, e.g. tok.model")->required()->check(not_empty());
  t->add_flag("--json", *json, "print the result as one JSON object on the last line");
  t->callback([&run, paths, options, separator, model_out, json] {
    run = [=] { train_tokenizer(*paths, *options, *separator, *model_out, *json); };
  });

  auto tokenizer = std::make_shared<std::string>("byte");
  auto val_fraction = std::make_shared<double>(0.1);
  auto out_dir = std::make_shared<std::string>();
  CLI::App* e =
      tokenize->add_subcommand("encode", "tokenize text into OUT/train.bin and OUT/val.bin (and OUT/tokenizer.model)");
  e->add_option("text", *paths, text_help);
  e->add_option("--tokenizer", *tokenizer, "byte | a SentencePiece .model file | a directory of GPT-2's "
                "vocab.json and merges.txt")->capture_default_str()->check(not_empty());
  number_flag(e, "--val-fraction", *val_fraction, "share of the documents for validation, spread evenly (too few "
              "documents: the last share of the tokens); 0: an empty val.bin",
              {.min = 0, .max = 0.99});
  e->add_option("--separator", *separator, separator_help)->capture_default_str();
  e->add_option("--out", *out_dir, "directory for train.bin and val.bin")->required()->check(not_empty());
  e->add_flag("--json", *json, "print the result as one JSON object on the last line");
  e->callback([&run, paths, tokenizer, val_fraction, separator, out_dir, json] {
    run = [=] { encode_text(*paths, *tokenizer, *val_fraction, *separator, *out_dir, *json); };
  });
}

}  // namespace weft::cli
