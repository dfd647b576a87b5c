#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/data/text.h"
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
  data::DocumentSplit split = data::split_documents(corpus.documents, val_fraction);
  WEFT_CHECK(val_fraction == 0 || !split.val.empty(), ValueError, "a validation fraction of ", val_fraction, " of ",
             corpus.documents.size(), " documents is no document: give more documents (one per '", separator,
             "' line) or --val-fraction 0");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  WEFT_CHECK(!ec, IOError, "cannot create directory '", out_dir, "': ", ec.message());
  nlohmann::json result = {{"tokenizer", tokenizer->identity()}, {"vocab_size", tokenizer->vocab_size()}};
  std::cout << "tokenizer " << tokenizer->identity() << " (vocab " << tokenizer->vocab_size() << "), "
            << corpus.files.size() << " files\n";
  for (auto [name, documents] : {std::pair{"train", &split.train}, std::pair{"val", &split.val}}) {
    data::TokenShard shard = data::tokenize_documents(*documents, *tokenizer, separator);
    std::string path = out_dir + "/" + name + ".bin";
    data::write_token_shard(path, shard);
    // The bytes the shard decodes to: each document and the separator line after it.
    int64_t bytes = 0;
    for (const std::string& document : *documents) bytes += static_cast<int64_t>(document.size() + separator.size() + 1);
    auto tokens = static_cast<int64_t>(shard.tokens.size());
    double bytes_per_token = tokens ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0;
    std::cout << name << ": " << documents->size() << " documents, " << bytes << " bytes -> " << tokens << " tokens ("
              << fixed(bytes_per_token, 2) << " bytes per token) in " << path << "\n";
    result[name] = {{"documents", documents->size()}, {"bytes", bytes}, {"tokens", tokens},
                    {"bytes_per_token", bytes_per_token}, {"path", path}};
  }
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
  CLI::App* e = tokenize->add_subcommand("encode", "tokenize text into OUT/train.bin and OUT/val.bin");
  e->add_option("text", *paths, text_help);
  e->add_option("--tokenizer", *tokenizer, "byte | a SentencePiece .model file")->capture_default_str()->check(not_empty());
  number_flag(e, "--val-fraction", *val_fraction, "share of the documents for validation, spread evenly",
              {.min = 0, .max = 0.99});
  e->add_option("--separator", *separator, separator_help)->capture_default_str();
  e->add_option("--out", *out_dir, "directory for train.bin and val.bin")->required()->check(not_empty());
  e->add_flag("--json", *json, "print the result as one JSON object on the last line");
  e->callback([&run, paths, tokenizer, val_fraction, separator, out_dir, json] {
    run = [=] { encode_text(*paths, *tokenizer, *val_fraction, *separator, *out_dir, *json); };
  });
}

}  // namespace weft::cli
