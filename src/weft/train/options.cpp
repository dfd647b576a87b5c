#include "weft/train/options.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/flag_value.h"
#include "weft/infer/metadata.h"
#include "weft/io/atomic_file.h"
#include "weft/io/input_file.h"
#include "weft/nn/gpt.h"
#include "weft/nn/models.h"

namespace weft::train {

namespace {

template <typename T>
constexpr bool kIsOptional = false;
template <typename T>
constexpr bool kIsOptional<std::optional<T>> = true;

template <typename T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

void check_choice(std::string_view flag, const std::string& value, std::initializer_list<std::string_view> choices) {
  std::string names;
  for (std::string_view choice : choices) {
    if (value == choice) return;
    names += str(names.empty() ? "" : ", ", choice);
  }
  throw ValueError(str(flag, ": must be one of ", names, ", got '", value, "'"));
}

// --parallel's comma-separated parts.
std::vector<std::string> parallel_parts(const std::string& parallel) {
  std::vector<std::string> parts;
  for (size_t begin = 0; begin <= parallel.size();) {
    const size_t comma = std::min(parallel.find(',', begin), parallel.size());
    parts.push_back(parallel.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return parts;
}

bool has_part(const std::string& parallel, std::string_view part) {
  const std::vector<std::string> parts = parallel_parts(parallel);
  return std::find(parts.begin(), parts.end(), part) != parts.end();
}

}  // namespace

bool ImageOptions::is_table() const { return own_data() && !io::is_directory(data); }

int TrainOptions::zero_stage() const {
  for (int stage = 1; stage <= 3; ++stage)
    if (has_part(parallel, str("zero", stage))) return stage;
  return 0;
}

void TrainOptions::validate() const {
  constexpr Accepts<double> positive{.min = 0, .min_open = true}, non_negative{.min = 0};
  if (steps) check_flag("--steps", *steps, {.min = 1, .max = kMaxSteps});
  if (epochs) check_flag("--epochs", *epochs, {.min = 0, .max = kMaxSteps, .min_open = true});
  check_flag("--time-limit", time_limit, non_negative);
  check_flag("--limit-train-batches", limit_train_batches, {.min = 0, .max = kMaxCount});
  if (batch_size) check_flag("--batch-size", *batch_size, {.min = 1, .max = kMaxCount});
  if (lr) check_flag("--lr", *lr, positive);
  if (weight_decay) check_flag("--weight-decay", *weight_decay, non_negative);
  check_choice("--schedule", schedule, {"constant", "step", "cosine"});
  if (warmup) check_flag("--warmup", *warmup, {.min = 0, .max = kMaxSteps});
  WEFT_CHECK(!warmup || schedule == "cosine", ValueError, "--warmup: is not a flag of --schedule ", schedule,
             " (only cosine warms up)");
  if (clip_grad) check_flag("--clip-grad", *clip_grad, non_negative);
  check_flag("--grad-accum", grad_accum, {.min = 1, .max = kMaxCount});
  WEFT_CHECK(!batch_size || *batch_size % grad_accum == 0, ValueError, "--grad-accum: must divide --batch-size (",
             *batch_size, ") so that every micro-batch has batch-size / grad-accum samples, got '", grad_accum, "'");
  check_flag("--memory-limit", memory_limit, {.min = 0});
  if (!parallel.empty()) {
    const std::vector<std::string> parts = parallel_parts(parallel);
    const std::set<std::string> data = {"ddp", "dp", "zero1", "zero2", "zero3"}, model_splits = {"tp", "pp"};
    const auto is_data = [&](const std::string& part) { return data.contains(part); };
    const bool known = std::all_of(parts.begin(), parts.end(), [&](const std::string& part) {
      return is_data(part) || model_splits.contains(part);
    });
    WEFT_CHECK(known && std::set<std::string>(parts.begin(), parts.end()).size() == parts.size() &&
                   std::count_if(parts.begin(), parts.end(), is_data) <= 1,
               ValueError, "--parallel: a comma-separated list of at most one of ddp (or dp), zero1, zero2, zero3 "
               "and any of tp, pp, got '", parallel, "'");
  }
  const bool splits_model = has_part(parallel, "tp") || has_part(parallel, "pp");
  WEFT_CHECK(zero_stage() <= 1 || !splits_model, ValueError, "--parallel ", parallel, ": ZeRO-", zero_stage(),
             " shards gradients", zero_stage() == 3 ? " and parameters" : "", " over the data-parallel replicas of a "
             "whole model; a model split by tp or pp takes zero1 (its optimizer states sharded over the replicas)");
  check_flag("--tp", tp, {.min = 1, .max = 1 << 16});
  const bool tp_asked = has_part(parallel, "tp");
  WEFT_CHECK(tp_asked == (tp > 1), ValueError, tp_asked ? "--tp: --parallel " : "--parallel: --tp ",
             tp_asked ? str(parallel, " needs the tensor-parallel size, --tp 2 or more") : str(tp, " needs --parallel tp"));
  WEFT_CHECK(tp == 1 || model == nn::ModelKind::gpt, ValueError, "--parallel tp: splits the GPT's layers; --model ",
             nn::model_kind_name(model), " has no tensor-parallel version");
  WEFT_CHECK(tp == 1 || precision != amp::Precision::fp16, ValueError,
             "--precision: fp16 is not trained under --parallel tp yet (its loss scaler's inf check would need every "
             "rank's slice of the gradients); use bf16, which needs no loss scaling");
  WEFT_CHECK(tp == 1 || !auto_batch, ValueError, "--auto-batch: not under --parallel tp yet");
  check_flag("--pp", pp, {.min = 1, .max = 1 << 16});
  const bool pp_asked = has_part(parallel, "pp");
  WEFT_CHECK(pp_asked == (pp > 1), ValueError, pp_asked ? "--pp: --parallel " : "--parallel: --pp ",
             pp_asked ? str(parallel, " needs the number of pipeline stages, --pp 2 or more") : str(pp, " needs --parallel pp"));
  check_choice("--pp-schedule", pp_schedule, {"gpipe", "1f1b"});
  WEFT_CHECK(pp == 1 || model == nn::ModelKind::gpt, ValueError, "--parallel pp: cuts the GPT's blocks into stages; "
             "--model ", nn::model_kind_name(model), " has no pipeline version");
  WEFT_CHECK(pp == 1 || pp_schedule != "1f1b" || grad_accum >= pp, ValueError, "--pp-schedule 1f1b: needs at least as "
             "many micro-batches (--grad-accum) as stages (--pp ", pp, "), got ", grad_accum);
  WEFT_CHECK(pp == 1 || (precision != amp::Precision::fp16 && !auto_batch && !checkpoint_activations), ValueError,
             "--parallel pp: not with ",
             precision == amp::Precision::fp16 ? "--precision fp16" : auto_batch ? "--auto-batch" : "--checkpoint-activations",
             " yet");
  WEFT_CHECK(!print_schedule || pp > 1, ValueError, "--print-schedule: draws the pipeline of --parallel pp");
  if (!grad_compress.empty()) check_choice("--grad-compress", grad_compress, {"bf16", "fp16"});
  check_flag("--sync-every", sync_every, {.min = 1, .max = kMaxSteps});
  const bool ddp = zero_stage() == 0 && !splits_model;
  WEFT_CHECK(grad_compress.empty() || ddp, ValueError, "--grad-compress: compresses DDP's all-reduce; not under --parallel ",
             parallel);
  WEFT_CHECK(sync_every == 1 || (ddp && grad_compress.empty()), ValueError, "--sync-every: local SGD replaces DDP's "
             "gradient all-reduce; not with ", grad_compress.empty() ? str("--parallel ", parallel) : "--grad-compress");
  WEFT_CHECK(sync_every == 1 || precision == amp::Precision::fp32, ValueError,
             "--sync-every: averages the f32 parameters; not with --precision ", amp::precision_name(precision),
             " (its 16-bit copies and masters would go stale)");
  WEFT_CHECK(zero_stage() == 0 || precision != amp::Precision::fp16, ValueError,
             "--precision: fp16 is not trained under --parallel ", parallel, " yet (its loss scaler's inf check "
             "would need every rank's gradient shard); use bf16, which needs no loss scaling");
  check_flag("--bucket-mb", bucket_mb, {.min = 1, .max = 1 << 20});
  check_flag("--comm-timeout", comm_timeout, {.min = 0, .max = 1e9});
  WEFT_CHECK(!master_weights || precision == amp::Precision::bf16, ValueError,
             "--precision: must be bf16 with --master-weights (the model in bf16, f32 master weights in the "
             "optimizer), got '", amp::precision_name(precision), "'",
             precision == amp::Precision::fp16 ? " (f16 master weights with loss scaling are not implemented)" : "");
  if (eval_every) check_flag("--eval-every", *eval_every, {.min = 0, .max = kMaxSteps});
  check_flag("--log-every", log_every, {.min = 1, .max = kMaxSteps});
  WEFT_CHECK(profile_first_step.has_value() == profile_last_step.has_value(), ValueError,
             "--profile-steps: must be FIRST:LAST, both or neither");
  WEFT_CHECK(!profile_first_step || !profile_trace.empty(), ValueError,
             "--profile-steps: is not a flag without --profile (the trace they are recorded into)");
  if (!profile_trace.empty())
    if (const std::optional<std::string> why = io::why_not_replaceable(profile_trace))
      throw ValueError(str("--profile ", profile_trace, ": ", *why));
  if (profile_first_step)
    WEFT_CHECK(1 <= *profile_first_step && *profile_first_step <= *profile_last_step && *profile_last_step <= kMaxSteps,
               ValueError, "--profile-steps: must be FIRST:LAST with 1 <= FIRST <= LAST <= ", kMaxSteps, ", got '",
               *profile_first_step, ":", *profile_last_step, "'");
  WEFT_CHECK(!overwrite || !out_dir.empty(), ValueError, "--overwrite: deletes the run in --out, and no --out is given");
  WEFT_CHECK(!overwrite || out_dir != resume_dir, ValueError, "--overwrite: would delete the run that --resume ",
             resume_dir, " continues; continue it without --overwrite, or start a new run in another --out");
  WEFT_CHECK(!async_save || !out_dir.empty(), ValueError,
             "--async-save: saves checkpoints into --out, and no --out is given");
  check_flag("--threads", threads, {.min = 0, .max = kMaxThreads});
  check_flag("--prefetch", prefetch, {.min = 0, .max = kMaxThreads});
  check_choice("--dataset", image.dataset, {"fashion-mnist", "mnist"});
  if (is_image_task() && !image.own_data()) infer::image_data_dir(image.dataset, image.data_dir);
  validate_own_data();
  if (text.layers) check_flag("--layers", *text.layers, {.min = 1, .max = nn::kMaxGptLayers});
  const std::pair<const char*, const std::optional<int64_t>&> sizes[] = {
      {"--heads", text.heads}, {"--dim", text.dim}, {"--context", text.context}, {"--vocab", text.vocab}};
  for (const auto& [flag, size] : sizes)
    if (size) check_flag(flag, *size, {.min = 1, .max = kMaxCount});
  WEFT_CHECK(init_from.empty() || resume_dir.empty(), ValueError, "--init-from starts a new run from a checkpoint's "
             "weights and --resume continues a run: give one of them");
  if (!freeze.empty()) NamePattern("--freeze", freeze);  // refused here, before anything is built
  if (!reinit.empty()) NamePattern("--reinit", reinit);
  WEFT_CHECK(reinit.empty() || !init_from.empty(), ValueError, "--reinit: chooses which of --init-from's tensors "
             "start afresh, and no --init-from is given");
  // Resuming or starting from a checkpoint, an unset size is the checkpoint's, checked when it is read.
  if ((resume_dir.empty() && init_from.empty()) || (text.dim && text.heads)) {
    const int64_t heads = text.heads.value_or(nn::GPTConfig{}.heads), dim = text.dim.value_or(nn::GPTConfig{}.dim);
    WEFT_CHECK(dim % heads == 0, ValueError, "--dim: must be a multiple of --heads (", heads, "), got '", dim, "'");
  }
  check_flag("--dropout", text.dropout, {.min = 0, .max = 1, .max_open = true});
  check_flag("--val-fraction", text.val_fraction, {.min = 0, .max = 1, .max_open = true});
  check_flag("--eval-windows", text.eval_windows, {.min = 0});
}

void TrainOptions::validate_own_data() const {
  const char* image_flag = !image.image_size.empty() ? "--image-size"
                           : image.channels != 0     ? "--channels"
                           : !image.normalize.empty() ? "--normalize"
                                                      : nullptr;
  if (!is_image_task() || !image.own_data()) {
    const char* flag = image_flag                   ? image_flag
                       : !image.label_column.empty() ? "--label-column"
                       : image.val_fraction         ? "--val-fraction"
                                                    : nullptr;
    WEFT_CHECK(!flag, ValueError, flag, ": is a flag of --data (a folder of images or a CSV table)",
               is_image_task() ? str(", not of --dataset ", image.dataset) : str(" for --model mlp or cnn"));
    return;
  }
  if (image.val_fraction)
    check_flag("--val-fraction", *image.val_fraction, {.min = 0, .max = 1, .min_open = true, .max_open = true});
  if (image.is_table()) {
    WEFT_CHECK(!image_flag, ValueError, image_flag, ": is a flag of image folders; --data ", image.data,
               " is a file, read as a CSV table");
    WEFT_CHECK(model == nn::ModelKind::mlp, ValueError, "--model ", nn::model_kind_name(model), ": takes images; --data ",
               image.data, " is a file, read as a CSV table, whose rows the mlp takes (--model mlp)");
    return;
  }
  WEFT_CHECK(image.label_column.empty(), ValueError, "--label-column: is a flag of CSV tables; --data ", image.data,
             " is a folder of images");
  if (!image.image_size.empty()) {
    WEFT_CHECK(image.image_size.size() == 2, ValueError, "--image-size: must be HxW, got ", image.image_size.size(),
               " sizes");
    for (int64_t side : image.image_size) check_flag("--image-size", side, {.min = 1, .max = kMaxImageSide});
    if (model == nn::ModelKind::cnn)
      WEFT_CHECK(image.image_size[0] >= nn::kCnnMinSide && image.image_size[1] >= nn::kCnnMinSide, ValueError,
                 "--image-size: the cnn takes images of at least ", nn::kCnnMinSide, "x", nn::kCnnMinSide, ", got '",
                 image.image_size[0], "x", image.image_size[1], "'");
  }
  WEFT_CHECK(image.channels == 0 || image.channels == 1 || image.channels == 3, ValueError,
             "--channels: must be 1 (grey) or 3 (RGB), got '", image.channels, "'");
  if (!image.normalize.empty()) {
    const size_t count = image.normalize.size();
    WEFT_CHECK(count % 2 == 0 && (image.channels == 0 || std::ssize(image.normalize) == 2 * image.channels) &&
                   (count == 2 || count == 6),
               ValueError, "--normalize: must be the channels' means then their stds, ",
               image.channels == 3 ? "6 numbers" : image.channels == 1 ? "2 numbers" : "2 or 6 numbers",
               " (MEAN,STD or R,G,B means then R,G,B stds), got ", count);
    for (size_t i = 0; i < count; ++i)
      check_flag("--normalize", image.normalize[i], i < count / 2 ? Accepts<double>{.min = -1e6, .max = 1e6}
                                                                  : Accepts<double>{.min = 0, .max = 1e6, .min_open = true});
  }
}

// POSIX's regcomp rather than std::regex: GCC 12's <regex> trips -Wmaybe-uninitialized in the
// sanitizer build, and an extended POSIX expression is what grep -E takes.
NamePattern::NamePattern(const char* flag, const std::string& pattern) {
  const int error = ::regcomp(&compiled_, pattern.c_str(), REG_EXTENDED | REG_NOSUB);
  if (error != 0) {
    char why[256];
    ::regerror(error, &compiled_, why, sizeof why);
    throw ValueError(str(flag, ": '", pattern, "' is not a regular expression (", why, ")"));
  }
}
NamePattern::~NamePattern() { ::regfree(&compiled_); }
bool NamePattern::matches(const std::string& name) const { return ::regexec(&compiled_, name.c_str(), 0, nullptr, 0) == 0; }

void TrainOptions::inherit_unset(const nlohmann::json& saved, const std::function<bool(const std::string& flag)>& given,
                                 bool keep_layout) {
  // A field is taken when its flag was not given and the run recorded a value (null: the run took
  // the task's default, which this run takes too).
  auto take = [&](const std::string& flag, const char* key, auto& field) {
    if (given(flag) || !saved.contains(key) || saved[key].is_null()) return;
    using Field = std::remove_reference_t<decltype(field)>;
    try {
      if constexpr (kIsOptional<Field>)
        field = saved[key].template get<typename Field::value_type>();  // a std::optional
      else
        field = saved[key].template get<Field>();
    } catch (const nlohmann::json::exception&) {
      throw FormatError(str("the resumed run's recorded options: \"", key, "\" is ", saved[key].dump(),
                            ", not a value of ", flag));
    }
  };
  std::string model_text = nn::model_kind_name(model);
  take("--model", "model", model_text);
  model = nn::parse_model_kind(model_text);
  std::string optimizer_text = optim::optimizer_name(optimizer), precision_text = amp::precision_name(precision);
  take("--optimizer", "optimizer", optimizer_text);
  optimizer = optim::parse_optimizer(optimizer_text);
  take("--precision", "precision", precision_text);
  precision = amp::parse_precision(precision_text);
  // Options that only mean something beside another: taken with it, or not at all.
  if (!given("--precision")) take("--master-weights", "master_weights", master_weights);
  if (!given("--schedule")) take("--warmup", "warmup", warmup);
  take("--schedule", "schedule", schedule);
  if (!given("--optimizer")) {
    take("--lr", "lr", lr);
    take("--weight-decay", "weight_decay", weight_decay);
  }
  take("--batch-size", "batch_size", batch_size);
  take("--grad-accum", "grad_accum", grad_accum);
  take("--clip-grad", "clip_grad", clip_grad);
  take("--checkpoint-activations", "checkpoint_activations", checkpoint_activations);
  take("--auto-batch", "auto_batch", auto_batch);
  take("--eval-every", "eval_every", eval_every);
  take("--limit-train-batches", "limit_train_batches", limit_train_batches);
  take("--seed", "seed", seed);
  take("--freeze", "freeze", freeze);  // a resumed fine-tuning keeps its frozen tensors
  if (keep_layout && !given("--parallel")) {
    take("--parallel", "parallel", parallel);
    take("--tp", "tp", tp);
    take("--pp", "pp", pp);
    take("--pp-schedule", "pp_schedule", pp_schedule);
    take("--grad-compress", "grad_compress", grad_compress);
    take("--sync-every", "sync_every", sync_every);
    take("--bucket-mb", "bucket_mb", bucket_mb);
  }
  if (is_image_task()) {
    take("--dataset", "dataset", image.dataset);
    take("--data-dir", "data_dir", image.data_dir);
    take("--data", "data", image.data);
    take("--image-size", "image_size", image.image_size);
    take("--channels", "channels", image.channels);
    take("--normalize", "normalize", image.normalize);
    take("--label-column", "label_column", image.label_column);
    take("--val-fraction", "val_fraction", image.val_fraction);
  } else {
    take("--data", "data", text.data);
    take("--val-fraction", "val_fraction", text.val_fraction);
    take("--eval-windows", "eval_windows", text.eval_windows);
  }
}

nlohmann::json TrainOptions::agreed_across_ranks() const {
  return nlohmann::json::array({{"--model", nn::model_kind_name(model)}, {"--steps", or_null(steps)}, {"--epochs", or_null(epochs)}, {"--time-limit", time_limit},
          {"--limit-train-batches", limit_train_batches}, {"--batch-size", or_null(batch_size)},
          {"--optimizer", optim::optimizer_name(optimizer)}, {"--lr", or_null(lr)},
          {"--weight-decay", or_null(weight_decay)}, {"--schedule", schedule}, {"--warmup", or_null(warmup)},
          {"--clip-grad", or_null(clip_grad)}, {"--precision", amp::precision_name(precision)},
          {"--master-weights", master_weights}, {"--parallel", parallel}, {"--tp", tp}, {"--pp", pp},
          {"--pp-schedule", pp_schedule}, {"--grad-compress", grad_compress}, {"--sync-every", sync_every},
          {"--bucket-mb", bucket_mb}, {"--no-overlap", !ddp_overlap}, {"--grad-accum", grad_accum},
          {"--checkpoint-activations", checkpoint_activations}, {"--auto-batch", auto_batch},
          {"--eval-every", or_null(eval_every)}, {"--out", out_dir}, {"--resume", resume_dir}, {"--async-save", async_save},
          {"--init-from", init_from}, {"--freeze", freeze}, {"--reinit", reinit},
          {"--seed", seed},
          {"--dataset", image.dataset}, {"--data-dir", image.data_dir}, {"--image-size", image.image_size},
          {"--channels", image.channels}, {"--normalize", image.normalize}, {"--label-column", image.label_column},
          {"--layers", or_null(text.layers)},
          {"--heads", or_null(text.heads)}, {"--dim", or_null(text.dim)}, {"--context", or_null(text.context)},
          {"--vocab", or_null(text.vocab)}, {"--dropout", text.dropout}, {"--tokenizer", text.tokenizer},
          {"--data", is_image_task() ? nlohmann::json(image.data) : nlohmann::json(text.data)},
          {"--val-fraction", is_image_task() ? or_null(image.val_fraction) : nlohmann::json(text.val_fraction)},
          {"--eval-windows", text.eval_windows}});
}

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j = {{"model", nn::model_kind_name(model)}, {"steps", or_null(steps)}, {"epochs", or_null(epochs)},
                      {"time_limit", time_limit}, {"limit_train_batches", limit_train_batches},
                      {"batch_size", or_null(batch_size)}, {"optimizer", optim::optimizer_name(optimizer)}, {"lr", or_null(lr)},
                      {"weight_decay", or_null(weight_decay)}, {"schedule", schedule}, {"warmup", or_null(warmup)},
                      {"clip_grad", or_null(clip_grad)}, {"precision", amp::precision_name(precision)},
                      {"master_weights", master_weights}, {"parallel", parallel}, {"tp", tp}, {"pp", pp},
                      {"pp_schedule", pp_schedule}, {"grad_compress", grad_compress}, {"sync_every", sync_every},
                      {"bucket_mb", bucket_mb},
                      {"grad_accum", grad_accum},
                      {"checkpoint_activations", checkpoint_activations}, {"auto_batch", auto_batch},
                      {"memory_limit", memory_limit}, {"eval_every", or_null(eval_every)}, {"seed", seed},
                      {"threads", threads}, {"profile_trace", profile_trace}, {"init_from", init_from},
                      {"freeze", freeze}, {"reinit", reinit}};
  if (is_image_task() && image.own_data()) {
    j["data"] = image.data;
    j["image_size"] = image.image_size;
    j["channels"] = image.channels;
    j["normalize"] = image.normalize;
    j["label_column"] = image.label_column;
    j["val_fraction"] = or_null(image.val_fraction);
  } else if (is_image_task()) {
    j["dataset"] = image.dataset;
    j["data_dir"] = infer::image_data_dir(image.dataset, image.data_dir);
  } else {
    j["tokenizer"] = text.tokenizer;
    j["data"] = text.data;
    j["val_fraction"] = text.val_fraction;
    j["eval_windows"] = text.eval_windows;
  }
  return j;
}

}  // namespace weft::train
