// Language modelling, the task behind `weft train --model gpt` (train/task.h): a GPT (nn/gpt.h)
// learning to predict the next token of a text corpus (docs/gpt.md).
//
// Data. The text files are read as documents, split by document into training and validation
// (or, when that would hold out no document, by the tail of the tokens: data/text.h), and
// tokenized in memory. Token shards from `weft tokenize encode` are read as they are, with the
// tokenizer that made them. `--val-fraction 0` (or an empty val.bin) trains without validation.
// `--data random` instead draws uniform random tokens (a benchmark input: there is nothing to
// learn, and no bytes to measure bits per byte against).
// A training sample is a window of `context` tokens at a start drawn uniformly.
//
// Losses are natural-log cross-entropy per token (nats); bits per byte is the validation loss
// converted to bits and spread over the bytes the validation tokens decode to. The unigram
// baseline is the cross-entropy of the validation tokens under the training tokens' frequencies
// (add-one smoothed): what a model that ignores context would reach.
#include "weft/train/task.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "weft/autograd/grad_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/data/sampler.h"
#include "weft/data/text.h"
#include "weft/dist/world.h"
#include "weft/infer/metadata.h"
#include "weft/io/input_file.h"
#include "weft/memory/planner.h"
#include "weft/ops/loss.h"
#include "weft/train/checkpoint.h"

namespace weft::train {

namespace {

namespace fs = std::filesystem;

// --data random: enough distinct windows that no two steps of a benchmark see the same batch.
constexpr int64_t kRandomTrainTokens = 1 << 20, kRandomValTokens = 1 << 16;

nlohmann::json config_json(const nn::GPTConfig& c) {
  return {{"layers", c.layers}, {"heads", c.heads}, {"dim", c.dim}, {"context", c.context}, {"vocab", c.vocab},
          {"dropout", c.dropout}};
}

struct Corpus {
  data::TokenShard train, val;  // val without tokens: no validation
  int64_t val_bytes = 0;        // what the validation tokens decode to; 0 for random tokens
  std::string split;            // how validation was chosen, for the log and the evaluation line
};

data::TokenShard random_tokens(int64_t count, int64_t vocab, Generator gen) {
  data::TokenShard shard;
  shard.tokenizer = "random";
  shard.vocab_size = vocab;
  shard.tokens.resize(static_cast<size_t>(count));
  for (uint16_t& t : shard.tokens) t = static_cast<uint16_t>(gen.next_u64() % static_cast<uint64_t>(vocab));
  return shard;
}

std::string percent(double fraction) { return str(fraction * 100, "%"); }

// --data's text: split by document, or by the tail of the tokens where the fraction of the
// documents is none (data/text.h).
Corpus text_corpus(const TextOptions& o, const data::Tokenizer& tokenizer) {
  Corpus corpus;
  std::vector<std::string> documents;
  for (const std::string& file : data::expand_text_paths(o.data.empty() ? std::vector<std::string>{data::kFortunesDir} : o.data))
    for (std::string& document : data::read_text_documents(file)) documents.push_back(std::move(document));
  data::ShardSplit split = data::tokenize_split(documents, o.val_fraction, tokenizer);
  corpus.train = std::move(split.train);
  corpus.val = std::move(split.val);
  const size_t tokens = corpus.train.tokens.size() + corpus.val.tokens.size();
  WEFT_CHECK(o.val_fraction == 0 || !corpus.val.tokens.empty(), ValueError, "--val-fraction ", o.val_fraction, " of ",
             tokens, " tokens is no token: give more text, a larger --val-fraction, or --val-fraction 0 (no "
             "validation)");
  if (o.val_fraction == 0) corpus.split = "--val-fraction 0";
  else if (split.by_tokens)
    corpus.split = str("the last ", percent(o.val_fraction), " of the tokens (", documents.size(),
                       documents.size() == 1 ? " document" : " documents", ": too few to hold out whole ones)");
  else corpus.split = str(std::floor(static_cast<double>(documents.size()) * o.val_fraction), " of ", documents.size(),
                          " documents, spread evenly");
  std::vector<int32_t> ids(corpus.val.tokens.begin(), corpus.val.tokens.end());
  corpus.val_bytes = static_cast<int64_t>(tokenizer.decode(ids).size());
  return corpus;
}

// --data's token shards (weft tokenize encode): directories holding train.bin and val.bin, or
// .bin files, those named val.bin the validation. Empty when --data is text.
struct ShardInput {
  std::vector<data::TokenShard> train, val;
};

ShardInput read_shards(const std::vector<std::string>& paths) {
  ShardInput input;
  const auto shard_paths = std::count_if(paths.begin(), paths.end(), data::is_token_shard_path);
  if (shard_paths == 0) return input;
  WEFT_CHECK(shard_paths == static_cast<std::ptrdiff_t>(paths.size()), ValueError,
             "--data: names token shards and text together; train on one or the other (weft tokenize encode turns "
             "the text into shards)");
  for (const std::string& path : paths) {
    if (!fs::is_directory(path)) {
      (fs::path(path).filename() == "val.bin" ? input.val : input.train).push_back(data::read_token_shard(path));
      continue;
    }
    input.train.push_back(data::read_token_shard((fs::path(path) / "train.bin").string()));
    const fs::path val = fs::path(path) / "val.bin";
    WEFT_CHECK(fs::exists(val), IOError, "'", path, "' holds train.bin but no val.bin; weft tokenize encode writes both "
               "(an empty val.bin with --val-fraction 0): pass ", (fs::path(path) / "train.bin").string(),
               " alone for no validation, or encode the text again");
    input.val.push_back(data::read_token_shard(val.string()));
  }
  WEFT_CHECK(!input.train.empty(), ValueError, "--data: names only validation shards (val.bin); add the training one, "
             "DIR/train.bin");
  return input;
}

// The tokenizer that made the shards, when no --tokenizer names it: bytes, or the files weft
// tokenize encode writes beside them (tokenizer.model; GPT-2's vocab.json and merges.txt).
std::unique_ptr<data::Tokenizer> shard_tokenizer(const data::TokenShard& shard) {
  if (shard.tokenizer == "byte") return data::load_tokenizer("byte");
  if (shard.tokenizer.starts_with("gpt2-bpe:"))
    return data::load_tokenizer(fs::path(shard.path).parent_path().string());
  const std::string model = (fs::path(shard.path).parent_path() / "tokenizer.model").string();
  WEFT_CHECK(fs::exists(model), IOError, "'", shard.path, "' was made by tokenizer ", shard.tokenizer,
             ", and no tokenizer.model sits beside it: pass that tokenizer's model file with --tokenizer");
  return data::load_tokenizer(model);
}

Corpus shard_corpus(ShardInput input, const data::Tokenizer& tokenizer) {
  Corpus corpus;
  for (auto [shards, joined] : {std::pair{&input.train, &corpus.train}, std::pair{&input.val, &corpus.val}}) {
    *joined = {tokenizer.identity(), tokenizer.vocab_size(), {}, {}};
    for (const data::TokenShard& shard : *shards) {
      data::check_shard_tokenizer(shard, tokenizer);
      joined->tokens.insert(joined->tokens.end(), shard.tokens.begin(), shard.tokens.end());
      joined->path += str(joined->path.empty() ? "" : ", ", shard.path);
    }
  }
  corpus.split = !corpus.val.tokens.empty() ? corpus.val.path
                 : corpus.val.path.empty() ? "--data names no val.bin"
                                           : corpus.val.path + " is empty: weft tokenize encode --val-fraction 0";
  std::vector<int32_t> ids(corpus.val.tokens.begin(), corpus.val.tokens.end());
  corpus.val_bytes = static_cast<int64_t>(tokenizer.decode(ids).size());
  return corpus;
}

// Nats per token of the validation tokens under the training tokens' add-one-smoothed frequencies.
double unigram_loss(const data::TokenShard& train, const data::TokenShard& val, int64_t vocab) {
  std::vector<double> counts(static_cast<size_t>(vocab), 1.0);
  for (uint16_t t : train.tokens) counts[t] += 1;
  const double total = static_cast<double>(train.tokens.size() + vocab);
  double nats = 0;
  for (uint16_t t : val.tokens) nats -= std::log(counts[t] / total);
  return nats / static_cast<double>(val.tokens.size());
}

// Mean cross-entropy (nats per token) over the first `max_windows` non-overlapping windows (0: all).
double validation_loss(nn::Module& model, const data::TokenDataset& val, int64_t batch_size, int64_t max_windows,
                       const LossFn& loss, const EvalProgress& progress) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t windows = max_windows > 0 ? std::min(max_windows, val.size()) : val.size();
  double loss_sum = 0;
  std::vector<int64_t> indices;
  for (int64_t begin = 0; begin < windows; begin += batch_size) {
    indices.clear();
    for (int64_t i = begin; i < std::min(begin + batch_size, windows); ++i) indices.push_back(i);
    data::Batch batch = val.get_batch(indices);
    Tensor logits = model(batch.inputs);
    loss_sum += loss(logits.view({batch.targets.numel(), logits.size(-1)}), batch.targets.reshape({-1})).item();
    if (progress) progress(begin / batch_size + 1, (windows + batch_size - 1) / batch_size);
  }
  model.train(was_training);
  return loss_sum / static_cast<double>(windows * val.context());
}

// Each architecture field: the flag's, else the checkpoint's, else the default.
nn::GPTConfig resolve_config(const TextOptions& o, const std::optional<infer::SavedGPT>& saved, int64_t tokenizer_vocab) {
  auto pick = [&](const std::optional<int64_t>& flag, int64_t nn::GPTConfig::*field, int64_t fallback) {
    if (flag) return *flag;
    return saved ? (*saved).config.*field : fallback;
  };
  const nn::GPTConfig defaults;
  nn::GPTConfig c{.layers = pick(o.layers, &nn::GPTConfig::layers, defaults.layers),
                  .heads = pick(o.heads, &nn::GPTConfig::heads, defaults.heads),
                  .dim = pick(o.dim, &nn::GPTConfig::dim, defaults.dim),
                  .context = pick(o.context, &nn::GPTConfig::context, defaults.context),
                  .vocab = pick(o.vocab, &nn::GPTConfig::vocab, tokenizer_vocab),
                  .dropout = o.dropout};
  c.check();
  if (saved) {
    const nn::GPTConfig& s = saved->config;
    WEFT_CHECK(c.layers == s.layers && c.heads == s.heads && c.dim == s.dim && c.context == s.context &&
                   c.vocab == s.vocab,
               ValueError, "the checkpoint in ", saved->dir, " holds a GPT with ", config_json(s).dump(),
               "; the flags ask for ", config_json(c).dump(), " (drop the architecture flags to resume)");
  }
  return c;
}

}  // namespace

namespace {

// GPT recipes train with AdamW at betas (0.9, 0.95), weight decay 0.1 and the gradients' norm
// clipped to 1 (nanoGPT's, GPT-3's); 2e-3 suits the default small model. Validation runs only at
// the end unless --eval-every asks, in batches of the training batch size.
const TaskDefaults kTextDefaults{.epochs = 1, .batch_size = 16, .adam_lr = 2e-3, .sgd_lr = 0.1,
                                 .weight_decay = 0.1, .beta2 = 0.95, .clip_grad = 1.0, .warmup = std::nullopt,
                                 .eval_every = 0, .eval_batch = 0};

class LanguageTask : public Task {
 public:
  LanguageTask(const TrainOptions& o, std::ostream& log) : eval_windows_(o.text.eval_windows) {
    const TextOptions& t = o.text;
    std::optional<infer::SavedGPT> saved;
    if (!o.resume_dir.empty() || !o.init_from.empty())
      saved = infer::read_saved_gpt(!o.resume_dir.empty() ? o.resume_dir : o.init_from);
    random_data_ = t.data.size() == 1 && t.data[0] == "random";
    ShardInput shards = random_data_ ? ShardInput{} : read_shards(t.data);
    const bool from_shards = !shards.train.empty();
    tokenizer_ = saved                  ? infer::tokenizer_for(*saved, t.tokenizer)
                 : !t.tokenizer.empty() ? data::load_tokenizer(t.tokenizer)
                 : from_shards          ? shard_tokenizer(shards.train[0])
                                        : data::load_tokenizer("byte");
    config_ = resolve_config(t, saved, tokenizer_->vocab_size());
    // Every rank builds the whole model in f32 first (a split keeps its share after): a GPT whose
    // weights alone exceed the machine's memory is refused before any of it is allocated.
    const double weights = 4.0 * static_cast<double>(config_.num_parameters()),
                 memory = static_cast<double>(io::usable_memory_bytes());
    WEFT_CHECK(weights <= memory, ValueError, "the GPT of ", config_.layers, " layers of width ", config_.dim,
               " (--layers, --dim) has ", config_.num_parameters() == INT64_MAX ? "more than 2^63" :
               str(config_.num_parameters()), " parameters: ",
               weights > 9e18 ? "more than 8 EiB" : format_bytes(static_cast<int64_t>(weights)), " of f32 weights "
               "alone, more than this machine's ", format_bytes(static_cast<int64_t>(memory)), " of memory");
    // A step's activations grow with the micro-batch: one that the planner (memory/planner.h) says
    // cannot fit this machine's memory, every rank on this host holding its own, is refused before
    // the data is read, rather than found by the kernel's out-of-memory killer. --auto-batch is
    // left to find its micro-batch itself, and a split model's shares are not planned here.
    if (!o.auto_batch && o.tp == 1 && o.pp == 1) {
      const dist::World& w = dist::world();
      const int64_t batch = o.batch_size.value_or(kTextDefaults.batch_size);
      const int64_t micro = std::max<int64_t>(1, batch / w.size / o.grad_accum);
      const memory::Plan plan = memory::make_plan(
          memory::ModelDescription::gpt(config_),
          {.batch = micro * w.size, .precision = o.precision, .optimizer = o.optimizer, .zero = o.zero_stage(),
           .world = w.size, .checkpoint_activations = o.checkpoint_activations, .device = "cpu"});
      const double needed = static_cast<double>(plan.total_bytes) * w.local_size;
      WEFT_CHECK(needed <= memory, ValueError, "a step of ", micro, " sequences of ", config_.context,
                 " tokens (--batch-size ", batch, w.size > 1 ? str(" over ", w.size, " ranks") : std::string(),
                 o.grad_accum > 1 ? str(", --grad-accum ", o.grad_accum) : std::string(), ") needs about ",
                 format_bytes(static_cast<int64_t>(needed)), w.local_size > 1 ? " on this host's ranks" : "",
                 " (weft plan's estimate), more than this machine's ", format_bytes(static_cast<int64_t>(memory)),
                 " of memory; run it in micro-batches (--grad-accum), or with --checkpoint-activations or --auto-batch");
    }
    // Each rank gathers its share of the step's token ids whole (inputs and targets, i64) before
    // cutting micro-batches from them: a --batch-size whose ids alone exceed the memory is refused
    // here, whatever --grad-accum makes of the micro-batch.
    {
      const dist::World& w = dist::world();
      const int64_t batch = o.batch_size.value_or(kTextDefaults.batch_size);
      const double ids = 16.0 * static_cast<double>(batch) / w.size * w.local_size * static_cast<double>(config_.context);
      WEFT_CHECK(ids <= memory, ValueError, "--batch-size ", batch, ": a step's ", batch, " sequences of ",
                 config_.context, " tokens take ", format_bytes(static_cast<int64_t>(std::min(ids, 9e18))),
                 " of token ids alone", w.local_size > 1 ? " on this host's ranks" : "", ", more than this machine's ",
                 format_bytes(static_cast<int64_t>(memory)), " of memory");
    }
    WEFT_CHECK(random_data_ || config_.vocab >= tokenizer_->vocab_size(), ValueError,
               "--vocab: must be at least the tokenizer's vocabulary of ", tokenizer_->vocab_size(), ", got '",
               config_.vocab, "'");

    Corpus corpus;
    if (random_data_) {
      WEFT_CHECK(config_.vocab <= 65536, ValueError, "--vocab: must be at most 65536 with --data random (its tokens are "
                 "u16), got '", config_.vocab, "'");
      corpus.train = random_tokens(kRandomTrainTokens, config_.vocab, Generator(o.seed));
      corpus.val = random_tokens(kRandomValTokens, config_.vocab, Generator(o.seed + 1));
    } else {
      corpus = !from_shards ? text_corpus(t, *tokenizer_) : shard_corpus(std::move(shards), *tokenizer_);
    }
    auto check_window = [&](const data::TokenShard& shard, const char* which, const std::string& remedy) {
      WEFT_CHECK(static_cast<int64_t>(shard.tokens.size()) > config_.context, ValueError, "--context ", config_.context,
                 ": a window needs ", config_.context + 1, " tokens (inputs and next-token targets), and there are ",
                 shard.tokens.size(), " ", which, " tokens; use a shorter --context, ", remedy);
    };
    check_window(corpus.train, "training", "or more text");
    if (!corpus.val.tokens.empty())
      check_window(corpus.val, "validation", from_shards ? "or encode with a larger --val-fraction"
                                                         : "a larger --val-fraction, or --val-fraction 0 (no validation)");
    train_ = std::make_shared<data::TokenDataset>(std::move(corpus.train), config_.context);
    if (!corpus.val.tokens.empty()) {
      val_ = std::make_shared<data::TokenDataset>(std::move(corpus.val), config_.context, /*stride=*/config_.context);
      tokens_per_byte_ = corpus.val_bytes > 0 ? static_cast<double>(val_->shard().tokens.size()) /
                                                    static_cast<double>(corpus.val_bytes)
                                              : NAN;
      unigram_bits_per_byte_ =
          unigram_loss(train_->shard(), val_->shard(), config_.vocab) * kBitsPerNat * tokens_per_byte_;
    }
    split_ = corpus.split;
    log << "GPT " << config_json(config_).dump() << "; tokenizer " << tokenizer_->identity() << "; "
        << train_->shard().tokens.size() << " training tokens, "
        << (val_ ? str(val_->shard().tokens.size(), " validation tokens") : str("no validation (", split_, ")"))
        << "\n";
    if (val_ && !split_.empty()) log << "validation: " << split_ << "\n";
    if (val_ && !random_data_)
      log << "unigram baseline: " << unigram_bits_per_byte_ << " bits/byte (" << 1 / tokens_per_byte_ << " bytes/token)\n";
  }

  const TaskDefaults& defaults() const override { return kTextDefaults; }
  int64_t eval_samples() const override {
    if (!val_) return 0;
    return eval_windows_ > 0 ? std::min(eval_windows_, val_->size()) : val_->size();
  }
  std::shared_ptr<nn::Module> make_model(bool checkpoint_activations) const override {
    auto model = std::make_shared<nn::GPT>(config_);
    model->set_checkpoint_activations(checkpoint_activations);
    return model;
  }
  std::shared_ptr<const data::Dataset> train_data() const override { return train_; }
  // Windows start anywhere in the token stream, so an epoch of every window once would be
  // `context` passes over the text: starts are drawn with replacement instead (ReplacementSampler),
  // and an epoch is as many windows as the training tokens would fill end to end.
  // Across ranks, each takes its slice of every one-process batch (disjoint windows).
  std::shared_ptr<const data::Sampler> train_sampler(int64_t batch_size, uint64_t seed, int rank,
                                                     int world) const override {
    const int64_t tokens = static_cast<int64_t>(train_->shard().tokens.size());
    const int64_t steps = std::max<int64_t>(1, tokens / (batch_size * config_.context));
    auto draws = std::make_shared<data::ReplacementSampler>(train_->size(), steps * batch_size, seed);
    if (world == 1) return draws;
    return std::make_shared<data::BatchSliceSampler>(draws, batch_size, rank, world);
  }
  const char* items() const override { return "tokens"; }
  bool tallies_accuracy() const override { return false; }

  // Nats per token; bits per byte spreads the loss in bits over the bytes the validation tokens
  // decode to, which makes tokenizers comparable (NaN for random tokens: they decode to nothing).
  Evaluation evaluate(nn::Module& model, int64_t batch_size, const LossFn& loss_fn,
                      const EvalProgress& progress) const override {
    // Nothing held out, so nothing to measure or to diverge: a loss of 0 passes the trainer's check.
    if (!val_)
      return {.loss = 0, .scalars = nlohmann::json::object(), .result = {{"val_loss", nullptr}},
              .line = str("no validation set (", split_, ")")};
    const double loss = validation_loss(model, *val_, batch_size, eval_windows_, loss_fn, progress);
    const double bits_per_byte = loss * kBitsPerNat * tokens_per_byte_;
    Evaluation e{.loss = loss,
                 .scalars = {{"val/loss", loss}},
                 .result = {{"val_loss", loss}, {"val_bits_per_byte", bits_per_byte},
                            {"unigram_bits_per_byte", unigram_bits_per_byte_}},
                 .line = str("validation loss ", loss, " nats/token")};
    if (!random_data_) {
      e.scalars["val/bits_per_byte"] = bits_per_byte;
      e.line += str(", ", bits_per_byte, " bits/byte (unigram baseline ", unigram_bits_per_byte_, ")");
    }
    return e;
  }

  std::map<std::string, std::string> checkpoint_metadata() const override {
    return infer::gpt_metadata(config_, *tokenizer_);
  }
  void save_files(const std::string& dir) const override { infer::save_tokenizer(*tokenizer_, dir); }
  nlohmann::json describe() const override {
    nlohmann::json d = config_json(config_);
    d.erase("dropout");
    d["tokenizer"] = tokenizer_->identity();
    return d;
  }

 private:
  static constexpr double kBitsPerNat = 1.4426950408889634;  // 1 / ln 2
  int64_t eval_windows_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  nn::GPTConfig config_;
  bool random_data_ = false;
  std::shared_ptr<data::TokenDataset> train_, val_;  // val_ null: no validation
  std::string split_;
  double tokens_per_byte_ = NAN, unigram_bits_per_byte_ = NAN;
};

}  // namespace

const TaskDefaults& language_task_defaults() { return kTextDefaults; }

std::unique_ptr<Task> make_language_task(const TrainOptions& o, std::ostream& log) {
  return std::make_unique<LanguageTask>(o, log);
}

}  // namespace weft::train
