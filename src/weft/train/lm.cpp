#include "weft/train/lm.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "weft/autograd/grad_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/data/sampler.h"
#include "weft/data/text.h"
#include "weft/infer/metadata.h"
#include "weft/monitor/progress.h"
#include "weft/monitor/system.h"
#include "weft/ops/loss.h"
#include "weft/optim/adam.h"
#include "weft/optim/clip.h"
#include "weft/optim/schedule.h"
#include "weft/train/checkpoint.h"
#include "weft/train/step.h"

namespace weft::train {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kDefaultLayers = 4, kDefaultHeads = 4, kDefaultDim = 128, kDefaultContext = 128;
// --data random: enough distinct windows that no two steps of a benchmark see the same batch.
constexpr int64_t kRandomTrainTokens = 1 << 20, kRandomValTokens = 1 << 16;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

nlohmann::json config_json(const nn::GPTConfig& c) {
  return {{"layers", c.layers}, {"heads", c.heads}, {"dim", c.dim}, {"context", c.context}, {"vocab", c.vocab},
          {"dropout", c.dropout}};
}

struct Corpus {
  data::TokenShard train, val;
  int64_t val_bytes = 0;  // what the validation tokens decode to; 0 for random tokens
};

data::TokenShard random_tokens(int64_t count, int64_t vocab, Generator gen) {
  data::TokenShard shard;
  shard.tokenizer = "random";
  shard.vocab_size = vocab;
  shard.tokens.resize(static_cast<size_t>(count));
  for (uint16_t& t : shard.tokens) t = static_cast<uint16_t>(gen.next_u64() % static_cast<uint64_t>(vocab));
  return shard;
}

Corpus load_corpus(const LMOptions& o, const data::Tokenizer& tokenizer, int64_t vocab) {
  Corpus corpus;
  if (o.data.size() == 1 && o.data[0] == "random") {
    WEFT_CHECK(vocab <= 65536, ValueError, "--data random: --vocab ", vocab, " does not fit u16 tokens");
    corpus.train = random_tokens(kRandomTrainTokens, vocab, Generator(o.seed));
    corpus.val = random_tokens(kRandomValTokens, vocab, Generator(o.seed + 1));
    return corpus;
  }
  std::vector<std::string> documents;
  for (const std::string& file : data::expand_text_paths(o.data.empty() ? std::vector<std::string>{data::kFortunesDir} : o.data))
    for (std::string& document : data::read_text_documents(file)) documents.push_back(std::move(document));
  data::DocumentSplit split = data::split_documents(documents, o.val_fraction);
  WEFT_CHECK(!split.val.empty(), ValueError, "--val-fraction ", o.val_fraction, " of ", documents.size(),
             " documents leaves none for validation");
  corpus.train = data::tokenize_documents(split.train, tokenizer);
  corpus.val = data::tokenize_documents(split.val, tokenizer);
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
double evaluate(nn::GPT& model, const data::TokenDataset& val, int64_t batch_size, int64_t max_windows) {
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
    loss_sum += cross_entropy(logits.view({batch.targets.numel(), logits.size(-1)}), batch.targets.reshape({-1}),
                              Reduction::sum).item();
  }
  model.train(was_training);
  return loss_sum / static_cast<double>(windows * val.context());
}

void check_options(const LMOptions& o, std::ostream& log) {
  WEFT_CHECK(o.batch_size > 0, ValueError, "--batch-size must be positive, got ", o.batch_size);
  WEFT_CHECK(o.steps >= 0 && o.epochs >= 0 && o.time_limit >= 0, ValueError,
             "--steps, --epochs and --time-limit must not be negative");
  WEFT_CHECK(o.lr > 0, ValueError, "--lr must be positive, got ", o.lr);
  WEFT_CHECK(o.weight_decay >= 0, ValueError, "--weight-decay must not be negative, got ", o.weight_decay);
  WEFT_CHECK(o.schedule == "cosine" || o.schedule == "constant", ValueError, "unknown schedule '", o.schedule,
             "' for a GPT: expected cosine or constant");
  WEFT_CHECK(o.clip_grad >= 0, ValueError, "--clip-grad must not be negative, got ", o.clip_grad);
  WEFT_CHECK(o.threads >= 0, ValueError, "--threads must not be negative, got ", o.threads);
  WEFT_CHECK(o.log_every > 0, ValueError, "--log-every must be positive, got ", o.log_every);
  WEFT_CHECK(o.eval_every >= 0 && o.eval_windows >= 0, ValueError, "--eval-every and --eval-windows must not be negative");
  WEFT_CHECK(o.grad_accum > 0 && o.batch_size % o.grad_accum == 0, ValueError, "--grad-accum ", o.grad_accum,
             " must be a positive divisor of --batch-size ", o.batch_size);
  WEFT_CHECK(o.memory_limit >= 0, ValueError, "--memory-limit must not be negative");
  check_precision(o.precision, log);
}

// Each architecture field: the flag's, else the checkpoint's, else the default.
nn::GPTConfig resolve_config(const LMOptions& o, const std::optional<infer::SavedGPT>& saved, int64_t tokenizer_vocab) {
  auto pick = [&](int64_t flag, int64_t nn::GPTConfig::*field, int64_t fallback) {
    if (flag > 0) return flag;
    return saved ? (*saved).config.*field : fallback;
  };
  nn::GPTConfig c{.layers = pick(o.model.layers, &nn::GPTConfig::layers, kDefaultLayers),
                  .heads = pick(o.model.heads, &nn::GPTConfig::heads, kDefaultHeads),
                  .dim = pick(o.model.dim, &nn::GPTConfig::dim, kDefaultDim),
                  .context = pick(o.model.context, &nn::GPTConfig::context, kDefaultContext),
                  .vocab = pick(o.model.vocab, &nn::GPTConfig::vocab, tokenizer_vocab),
                  .dropout = o.model.dropout};
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

nlohmann::json LMOptions::to_json() const {
  return {{"model", "gpt"}, {"gpt", config_json(model)}, {"tokenizer", tokenizer}, {"data", data},
          {"val_fraction", val_fraction}, {"batch_size", batch_size}, {"steps", steps}, {"epochs", epochs},
          {"time_limit", time_limit}, {"lr", lr}, {"weight_decay", weight_decay}, {"schedule", schedule},
          {"warmup", warmup}, {"clip_grad", clip_grad}, {"seed", seed}, {"threads", threads},
          {"eval_every", eval_every}, {"eval_windows", eval_windows}, {"precision", precision},
          {"grad_accum", grad_accum}, {"checkpoint_activations", checkpoint_activations}, {"auto_batch", auto_batch},
          {"memory_limit", memory_limit}};
}

LMResult train_language_model(const LMOptions& o, std::ostream& log, bool interactive) {
  const Clock::time_point start = Clock::now();
  check_options(o, log);
  if (o.threads > 0) set_num_threads(o.threads);
  if (o.memory_limit > 0) CachingAllocator::cpu().set_memory_limit(o.memory_limit);

  std::optional<infer::SavedGPT> saved;
  if (!o.resume_dir.empty()) saved = infer::read_saved_gpt(o.resume_dir);
  std::unique_ptr<data::Tokenizer> tokenizer =
      saved ? infer::tokenizer_for(*saved, o.tokenizer) : data::load_tokenizer(o.tokenizer.empty() ? "byte" : o.tokenizer);
  const nn::GPTConfig config = resolve_config(o, saved, tokenizer->vocab_size());
  const bool random_data = o.data.size() == 1 && o.data[0] == "random";
  WEFT_CHECK(random_data || config.vocab >= tokenizer->vocab_size(), ValueError, "--vocab ", config.vocab,
             " is smaller than the tokenizer's vocabulary of ", tokenizer->vocab_size());

  Corpus corpus = load_corpus(o, *tokenizer, config.vocab);
  data::TokenDataset train_data(std::move(corpus.train), config.context);
  data::TokenDataset val_data(std::move(corpus.val), config.context, /*stride=*/config.context);
  const int64_t train_tokens = static_cast<int64_t>(train_data.shard().tokens.size());
  const double tokens_per_byte =
      corpus.val_bytes > 0 ? static_cast<double>(val_data.shard().tokens.size()) / static_cast<double>(corpus.val_bytes)
                           : NAN;
  const double bits_per_nat = 1 / std::log(2.0);
  const double unigram_bpb =
      unigram_loss(train_data.shard(), val_data.shard(), config.vocab) * bits_per_nat * tokens_per_byte;

  manual_seed(o.seed);
  nn::GPT model(config);
  model.set_checkpoint_activations(o.checkpoint_activations);
  optim::AdamW optimizer(model.parameters(),
                         {.lr = o.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = o.weight_decay});
  const std::optional<DType> low_precision = autocast_type(o.precision);
  std::optional<amp::GradScaler> scaler;
  if (o.precision == "fp16") scaler.emplace();
  TrainerState state;
  if (saved) {
    state = load_checkpoint(o.resume_dir, model, "gpt", optimizer);
    default_generator().set_state(state.rng);
    if (scaler && state.grad_scaler) scaler->load_state(*state.grad_scaler);
    log << "resumed from " << o.resume_dir << " at step " << state.step << "\n";
  }
  log << "GPT " << config_json(config).dump() << ": " << model.num_parameters() << " parameters; tokenizer "
      << tokenizer->identity() << "; " << train_tokens << " training tokens, " << val_data.shard().tokens.size()
      << " validation tokens\n";
  if (!random_data)
    log << "unigram baseline: " << unigram_bpb << " bits/byte (" << 1 / tokens_per_byte << " bytes/token)\n";

  const int64_t tokens_per_step = o.batch_size * config.context;
  const int64_t steps_per_epoch = std::max<int64_t>(1, train_tokens / tokens_per_step);
  int64_t micro_batch = o.batch_size / o.grad_accum;
  data::ReplacementSampler sampler(train_data.size(), o.batch_size, o.seed);
  auto batch_at = [&](int64_t step) { return train_data.get_batch(sampler.indices(step)); };

  int64_t planned_steps = o.steps > 0                ? o.steps
                          : o.epochs > 0             ? std::llround(std::ceil(o.epochs * steps_per_epoch))
                          : saved && o.time_limit == 0 ? state.options.value("planned_steps", int64_t{0})
                                                     : 0;
  if (planned_steps == 0 && o.time_limit > 0) {
    // Time a few forward and backward passes on the first batch (the first ones warm caches up),
    // then restore everything they touched: the gradients and the generator (dropout).
    const auto rng = default_generator().state();
    data::Batch batch = batch_at(state.step);
    double seconds = 0;
    for (int i = 0; i < 5; ++i) {
      const Clock::time_point t = Clock::now();
      accumulate_step(model, optimizer, batch, micro_batch, o.auto_batch, low_precision, scaler ? &*scaler : nullptr,
                      state.step, log, /*tally_correct=*/false);
      if (i >= 2) seconds += seconds_since(t);
    }
    optimizer.zero_grad();
    default_generator().set_state(rng);
    // The update and evaluation add to a step's time: plan on 10% more.
    const double per_step = 1.1 * seconds / 3;
    planned_steps = state.step + std::max<int64_t>(1, static_cast<int64_t>((o.time_limit - seconds_since(start)) / per_step));
    log << "time limit " << o.time_limit << " s: about " << per_step << " s per step, planning " << planned_steps
        << " steps\n";
  }
  if (planned_steps == 0) planned_steps = steps_per_epoch;  // nothing given: one epoch
  const int64_t warmup = o.warmup >= 0 ? o.warmup : std::min<int64_t>(100, planned_steps / 10);
  std::unique_ptr<optim::LRSchedule> schedule;
  if (o.schedule == "cosine") schedule = std::make_unique<optim::CosineWarmupLR>(o.lr, warmup, planned_steps);
  else schedule = std::make_unique<optim::ConstantLR>(o.lr);

  std::optional<MetricsLog> metrics;
  if (!o.out_dir.empty()) {
    std::error_code error;
    fs::create_directories(o.out_dir, error);
    if (error) throw IOError(str("cannot create --out directory ", o.out_dir, ": ", error.message()));
    metrics.emplace(o.out_dir, /*append=*/o.resume_dir == o.out_dir);
  }
  nlohmann::json saved_options = o.to_json();
  saved_options["gpt"] = config_json(config);
  saved_options["planned_steps"] = planned_steps;
  const std::map<std::string, std::string> model_metadata = infer::gpt_metadata(config, *tokenizer);

  LMResult result;
  result.params = model.num_parameters();
  result.model = config;
  result.tokenizer = tokenizer->identity();
  auto validate = [&] {
    const double loss = evaluate(model, val_data, o.batch_size, o.eval_windows);
    result.val_loss = loss;
    result.val_bits_per_byte = loss * bits_per_nat * tokens_per_byte;
    log << "step " << state.step << ": validation loss " << loss << " nats/token";
    if (!random_data) log << ", " << result.val_bits_per_byte << " bits/byte";
    log << "\n";
    if (!metrics) return;
    nlohmann::json scalars = {{"val/loss", loss}};
    if (!random_data) scalars["val/bits_per_byte"] = result.val_bits_per_byte;
    metrics->write(state.step, scalars);
    metrics->flush();
    state.epoch = state.step / steps_per_epoch;
    state.rng = default_generator().state();
    state.options = saved_options;
    if (scaler) state.grad_scaler = scaler->state();
    save_checkpoint(o.out_dir, model, "gpt", optimizer, state, model_metadata);
    infer::save_tokenizer(*tokenizer, o.out_dir);
  };

  CachingAllocator::cpu().reset_peak_stats();
  const Clock::time_point loop_start = Clock::now();
  double train_seconds = 0;
  double window_loss = 0;
  int64_t window_steps = 0;
  Clock::time_point window_start = Clock::now();
  monitor::ProgressBar bar(log, "train", planned_steps, tokens_per_step, interactive, o.log_every, "tokens");
  std::string shown;
  model.train();
  while (state.step < planned_steps) {
    const Clock::time_point step_start = Clock::now();
    data::Batch batch = batch_at(state.step);
    optim::set_scheduled_lr(optimizer, *schedule, state.step);
    StepTally tally = accumulate_step(model, optimizer, batch, micro_batch, o.auto_batch, low_precision,
                                      scaler ? &*scaler : nullptr, state.step, log, /*tally_correct=*/false);
    if (o.clip_grad > 0) {
      if (scaler) scaler->unscale_(optimizer);
      optim::clip_grad_norm(model.parameters(), o.clip_grad);
    }
    ++state.step;
    apply_update(optimizer, scaler ? &*scaler : nullptr, state.step, log);
    train_seconds += seconds_since(step_start);
    result.tokens += tokens_per_step;

    window_loss += tally.loss_sum / static_cast<double>(tokens_per_step);
    ++window_steps;
    if (window_steps == o.log_every || state.step == planned_steps) {
      result.train_loss = window_loss / static_cast<double>(window_steps);
      const double seconds = seconds_since(window_start);
      MemoryStats memory = CachingAllocator::cpu().stats();
      if (metrics)
        metrics->write(state.step, {{"train/loss", result.train_loss}, {"train/lr", optimizer.lr()},
                                    {"train/tokens_per_s", window_steps * tokens_per_step / seconds},
                                    {"memory/allocated_bytes", memory.allocated_bytes},
                                    {"memory/reserved_bytes", memory.reserved_bytes}});
      shown = str("loss ", std::to_string(result.train_loss).substr(0, 6));
      window_loss = 0;
      window_steps = 0;
      window_start = Clock::now();
    }
    bar.update(state.step, shown);
    if (o.eval_every > 0 && state.step % o.eval_every == 0 && state.step < planned_steps) validate();
    if (o.time_limit > 0 && seconds_since(loop_start) >= o.time_limit && state.step < planned_steps) {
      result.hit_time_limit = true;
      log << "\ntime limit of " << o.time_limit << " s reached at step " << state.step << " of " << planned_steps << "\n";
      break;
    }
  }
  if (!result.hit_time_limit) bar.finish(shown);
  validate();

  result.steps = state.step;
  result.micro_batch = micro_batch;
  if (scaler) {
    result.skipped_steps = scaler->skipped_steps();
    result.loss_scale = scaler->current_scale();
  }
  result.unigram_bits_per_byte = unigram_bpb;
  result.train_tokens_per_s = train_seconds > 0 ? static_cast<double>(result.tokens) / train_seconds : 0;
  result.peak_allocated_bytes = CachingAllocator::cpu().stats().peak_allocated_bytes;
  result.peak_rss_bytes = monitor::peak_rss_bytes();
  result.wall_s = seconds_since(start);
  return result;
}

}  // namespace weft::train
