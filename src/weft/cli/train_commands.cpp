#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "weft/autograd/autocast_mode.h"
#include "weft/cli/commands.h"
#include "weft/core/allocator.h"
#include "weft/core/threads.h"
#include "weft/data/dataset.h"
#include "weft/infer/load.h"
#include "weft/monitor/progress.h"
#include "weft/monitor/system.h"
#include "weft/train/lm.h"
#include "weft/train/trainer.h"

namespace weft::cli {

namespace {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * fraction);
  return buf;
}

void train(const train::ClassifierOptions& options, bool json) {
  train::TrainResult r = train::train_classifier(options, std::cout, monitor::stdout_is_terminal());
  std::cout << "test accuracy " << percent(r.test_accuracy) << " (loss " << r.test_loss << ")\n"
            << "wall time " << r.wall_s << " s, training " << static_cast<int64_t>(r.train_samples_per_s)
            << " samples/s\n"
            << "memory: allocator peak " << format_bytes(r.peak_allocated_bytes) << ", process peak RSS "
            << format_bytes(r.peak_rss_bytes) << "\n";
  if (options.precision == "fp16")
    std::cout << "fp16: " << r.skipped_steps << " steps skipped for inf/NaN gradients, final loss scale " << r.loss_scale
              << "\n";
  if (!options.out_dir.empty())
    std::cout << "checkpoint: " << options.out_dir << "/model.safetensors (resume with --resume " << options.out_dir
              << ")\nlogs: " << options.out_dir << "/metrics.jsonl and TensorBoard events (tensorboard --logdir "
              << options.out_dir << ")\n";
  if (json) {
    nlohmann::json out = {{"model", options.model}, {"epochs", options.epochs}, {"batch_size", options.batch_size},
                          {"optimizer", options.optimizer}, {"steps", r.steps}, {"test_accuracy", r.test_accuracy},
                          {"test_loss", r.test_loss}, {"train_samples_per_s", r.train_samples_per_s},
                          {"wall_s", r.wall_s}, {"peak_allocated_bytes", r.peak_allocated_bytes},
                          {"peak_rss_bytes", r.peak_rss_bytes}, {"params", r.params}, {"out", options.out_dir},
                          {"precision", options.precision}, {"grad_accum", options.grad_accum},
                          {"micro_batch", r.micro_batch}, {"checkpoint_activations", options.checkpoint_activations},
                          {"skipped_steps", r.skipped_steps}};
    if (options.precision == "fp16") out["loss_scale"] = r.loss_scale;
    std::cout << out.dump() << "\n";
  }
}

void eval(const std::string& checkpoint, const infer::LoadOptions& options, const std::string& data_dir,
          int64_t batch_size, bool json) {
  infer::LoadedModel loaded = infer::load_model(checkpoint, options);
  WEFT_CHECK(loaded.kind != "gpt", ValueError, checkpoint,
             " holds a GPT; weft eval measures the image classifiers (sample a GPT with weft generate)");
  if (!loaded.note.empty()) std::cerr << "note: " << loaded.note << "\n";
  data::ImageDataset test_data = data::load_mnist_idx(data_dir, false, loaded.normalization);
  // The batches are f32; a bf16 model's linear and convolution layers take them through autocast.
  AutocastGuard low_precision(loaded.dtype);
  train::EvalResult r = train::evaluate_classifier(*loaded.model, test_data, batch_size);
  const std::string& scheme = loaded.scheme;
  std::cout << loaded.kind << (scheme == "none" ? "" : " (" + scheme + ")")
            << (loaded.dtype == DType::f32 ? "" : str(" (", dtype_name(loaded.dtype), ")")) << " on " << r.samples
            << " test images: accuracy " << percent(r.accuracy) << ", loss " << r.loss << "\n";
  if (json)
    std::cout << nlohmann::json{{"model", loaded.kind}, {"quantization", scheme}, {"accuracy", r.accuracy},
                                {"loss", r.loss}, {"samples", r.samples}, {"dtype", dtype_name(loaded.dtype)},
                                {"dataset", loaded.dataset}, {"assumed_normalization", !loaded.note.empty()}}.dump()
              << "\n";
}

// Each tensor, then the seeds' arithmetic: what the same parameters take in each number format.
void info(const std::string& path, bool json) {
  infer::Weights weights = infer::load_weights(path);
  int64_t params = 0, bytes = 0;
  nlohmann::json tensors = nlohmann::json::array();
  if (!json) std::printf("%-24s %-6s %-18s %12s\n", "tensor", "dtype", "shape", "bytes");
  for (const auto& [name, t] : weights.state) {
    params += t.numel();
    bytes += t.nbytes();
    std::string shape = "[";
    for (size_t i = 0; i < t.shape().size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
    shape += "]";
    if (json) tensors.push_back({{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"bytes", t.nbytes()}});
    else std::printf("%-24s %-6s %-18s %12ld\n", name.c_str(), dtype_name(t.dtype()), shape.c_str(), long(t.nbytes()));
  }
  const std::pair<const char*, double> formats[] = {{"f32", 4}, {"f16", 2}, {"bf16", 2}, {"int8", 1}, {"int4", 0.5}};
  if (json) {
    nlohmann::json sizes;
    for (auto [format, per_param] : formats) sizes[format] = static_cast<int64_t>(params * per_param);
    std::cout << nlohmann::json{{"model", weights.model_name}, {"tensors", tensors}, {"params", params},
                                {"bytes", bytes}, {"bytes_by_format", sizes}}.dump()
              << "\n";
    return;
  }
  std::cout << "\n" << params << " parameters, " << format_bytes(bytes) << " as stored"
            << (weights.model_name.empty() ? "" : " (model " + weights.model_name + ")") << "\n";
  for (auto [format, per_param] : formats)
    std::printf("  in %-5s %ld params x %.1f bytes = %s\n", format, long(params), per_param,
                format_bytes(static_cast<int64_t>(params * per_param)).c_str());
}

// The flags of `weft train`, for every model; which ones apply depends on --model.
struct TrainFlags {
  std::string model = "cnn";
  double epochs = 0;       // 0: the model's default
  int64_t batch_size = 0;  // 0: the model's default
  double lr = 0;           // 0: the model's default
  std::string optimizer = "adamw";
  std::string schedule = "cosine";
  uint64_t seed = 0;
  int threads = 0;
  std::string out_dir, resume_dir;
  int64_t log_every = 50;
  std::string precision = "fp32";
  int64_t grad_accum = 1;
  bool checkpoint_activations = false, auto_batch = false, json = false;
  std::string memory_limit;
  train::ClassifierOptions classifier;  // the image-only flags land here directly
  train::LMOptions lm;                  // and the GPT-only ones here
};

// The options both trainers have, under the same names.
template <typename Options>
void set_shared_options(const TrainFlags& f, Options& o) {
  if (f.batch_size > 0) o.batch_size = f.batch_size;
  o.schedule = f.schedule;
  o.seed = f.seed;
  o.threads = f.threads;
  o.out_dir = f.out_dir;
  o.resume_dir = f.resume_dir;
  o.log_every = f.log_every;
  o.precision = f.precision;
  o.grad_accum = f.grad_accum;
  o.checkpoint_activations = f.checkpoint_activations;
  o.auto_batch = f.auto_batch;
  if (!f.memory_limit.empty()) o.memory_limit = parse_bytes(f.memory_limit);
}

void train_gpt(const TrainFlags& f) {
  train::LMOptions o = f.lm;
  if (f.epochs > 0) o.epochs = f.epochs;
  if (f.lr > 0) o.lr = f.lr;
  set_shared_options(f, o);
  train::LMResult r = train::train_language_model(o, std::cout, monitor::stdout_is_terminal());
  std::cout << "validation loss " << r.val_loss << " nats/token";
  if (!std::isnan(r.val_bits_per_byte))
    std::cout << ", " << r.val_bits_per_byte << " bits/byte (unigram baseline " << r.unigram_bits_per_byte << ")";
  std::cout << "\ntrained " << r.steps << " steps, " << r.tokens << " tokens this run: " << static_cast<int64_t>(r.train_tokens_per_s)
            << " tokens/s; wall time " << r.wall_s << " s\n"
            << "memory: allocator peak " << format_bytes(r.peak_allocated_bytes) << ", process peak RSS "
            << format_bytes(r.peak_rss_bytes) << "\n";
  if (o.precision == "fp16")
    std::cout << "fp16: " << r.skipped_steps << " steps skipped for inf/NaN gradients, final loss scale " << r.loss_scale
              << "\n";
  if (!o.out_dir.empty())
    std::cout << "checkpoint: " << o.out_dir << " (sample with weft generate --checkpoint " << o.out_dir
              << ", resume with --resume " << o.out_dir << ")\n";
  if (f.json) {
    nlohmann::json out = {{"model", "gpt"}, {"layers", r.model.layers}, {"heads", r.model.heads}, {"dim", r.model.dim},
                          {"context", r.model.context}, {"vocab", r.model.vocab}, {"tokenizer", r.tokenizer},
                          {"params", r.params}, {"steps", r.steps}, {"tokens", r.tokens}, {"train_loss", r.train_loss},
                          {"val_loss", r.val_loss}, {"val_bits_per_byte", r.val_bits_per_byte},
                          {"unigram_bits_per_byte", r.unigram_bits_per_byte},
                          {"train_tokens_per_s", r.train_tokens_per_s}, {"wall_s", r.wall_s},
                          {"peak_allocated_bytes", r.peak_allocated_bytes}, {"peak_rss_bytes", r.peak_rss_bytes},
                          {"batch_size", o.batch_size}, {"precision", o.precision}, {"grad_accum", o.grad_accum},
                          {"micro_batch", r.micro_batch}, {"checkpoint_activations", o.checkpoint_activations},
                          {"hit_time_limit", r.hit_time_limit}, {"skipped_steps", r.skipped_steps},
                          {"out", o.out_dir}};
    if (o.precision == "fp16") out["loss_scale"] = r.loss_scale;
    std::cout << out.dump() << "\n";
  }
}

void train_image_classifier(const TrainFlags& f) {
  train::ClassifierOptions o = f.classifier;
  o.model = f.model;
  if (f.epochs > 0) {
    WEFT_CHECK(f.epochs == std::floor(f.epochs), ValueError, "--epochs must be a whole number for ", f.model, ", got ",
               f.epochs);
    o.epochs = static_cast<int64_t>(f.epochs);
  }
  o.lr = f.lr;
  o.optimizer = f.optimizer;
  set_shared_options(f, o);
  train(o, f.json);
}

}  // namespace

void add_train_commands(CLI::App& app, std::function<void()>& run) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* t = app.add_subcommand("train", "train an image classifier on Fashion-MNIST, or a GPT on text");
  t->add_option("--model", f->model, "mlp | cnn | gpt")->check(CLI::IsMember({"mlp", "cnn", "gpt"}))->capture_default_str();
  t->add_option("--epochs", f->epochs, "passes over the data (default: 2 for mlp and cnn, 1 for gpt unless --steps or --time-limit)");
  t->add_option("--batch-size", f->batch_size, "samples per step (default: 128 images; 16 windows of --context tokens)");
  t->add_option("--lr", f->lr, "learning rate (default: adamw 4e-3, sgd 0.1; gpt 2e-3)");
  t->add_option("--optimizer", f->optimizer, "adamw | sgd (momentum 0.9; not for gpt)")
      ->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
  t->add_option("--schedule", f->schedule,
                "constant | step (x0.5 per epoch; not for gpt) | cosine (to zero at the end; gpt: after a warmup)")
      ->check(CLI::IsMember({"constant", "step", "cosine"}))->capture_default_str();
  t->add_option("--seed", f->seed)->capture_default_str();
  t->add_option("--threads", f->threads, "0: all cores (or OMP_NUM_THREADS)")->capture_default_str();
  t->add_option("--out", f->out_dir, "checkpoint, TensorBoard events and metrics.jsonl go here");
  t->add_option("--resume", f->resume_dir, "continue the run saved in this directory");
  t->add_option("--log-every", f->log_every, "steps between log records")->capture_default_str();
  t->add_option("--precision", f->precision,
                "fp32 | bf16 | fp16: autocast with f32 master weights; fp16 adds loss scaling")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  t->add_option("--grad-accum", f->grad_accum, "micro-batches of batch-size / K per optimizer step")->capture_default_str();
  t->add_flag("--checkpoint-activations", f->checkpoint_activations,
              "recompute activations in backward instead of keeping them");
  t->add_flag("--auto-batch", f->auto_batch,
              "on out-of-memory, halve the micro-batch and redo the step (the batch stays the same)");
  t->add_option("--memory-limit", f->memory_limit, "cap the allocator, e.g. 512MiB (as WEFT_MEMORY_LIMIT)");
  t->add_flag("--json", f->json, "print the result as one JSON object on the last line");

  std::vector<CLI::Option*> image_only = {
      t->add_option("--dataset", f->classifier.dataset, "fashion-mnist | mnist (the normalisation statistics)")
          ->check(CLI::IsMember({"fashion-mnist", "mnist"}))->capture_default_str(),
      t->add_option("--data-dir", f->classifier.data_dir, "IDX files, .gz or not")->capture_default_str(),
      t->add_option("--limit-train-batches", f->classifier.limit_train_batches, "train on the first N batches of each epoch"),
      t->add_option("--prefetch", f->classifier.prefetch, "batches prepared ahead in the background")->capture_default_str()};
  train::LMOptions& lm = f->lm;
  std::vector<CLI::Option*> gpt_only = {
      t->add_option("--layers", lm.model.layers, "GPT: transformer blocks (default 4)"),
      t->add_option("--heads", lm.model.heads, "GPT: attention heads (default 4)"),
      t->add_option("--dim", lm.model.dim, "GPT: model width (default 128)"),
      t->add_option("--context", lm.model.context, "GPT: tokens per window (default 128)"),
      t->add_option("--vocab", lm.model.vocab, "GPT: vocabulary size (default: the tokenizer's)"),
      t->add_option("--dropout", lm.model.dropout, "GPT: dropout probability")->capture_default_str(),
      t->add_option("--tokenizer", lm.tokenizer, "GPT: byte (default) or a SentencePiece model (weft tokenize train)"),
      t->add_option("--data", lm.data, "GPT: text files or directories (default: the fortunes), or random"),
      t->add_option("--val-fraction", lm.val_fraction, "GPT: documents held out for validation")->capture_default_str(),
      t->add_option("--steps", lm.steps, "GPT: optimizer steps (instead of --epochs)"),
      t->add_option("--time-limit", lm.time_limit, "GPT: stop training after this many seconds"),
      t->add_option("--warmup", lm.warmup, "GPT: warmup steps (default: 10% of the steps, at most 100)"),
      t->add_option("--weight-decay", lm.weight_decay, "GPT: AdamW's decoupled weight decay")->capture_default_str(),
      t->add_option("--clip-grad", lm.clip_grad, "GPT: clip the gradients' total norm (0: off)")->capture_default_str(),
      t->add_option("--eval-every", lm.eval_every, "GPT: steps between validations and checkpoints (0: at the end)"),
      t->add_option("--eval-windows", lm.eval_windows, "GPT: validation windows per evaluation (0: all)")};
  t->callback([&run, f, image_only, gpt_only] {
    run = [f, image_only, gpt_only] {
      const bool gpt = f->model == "gpt";
      for (CLI::Option* option : gpt ? image_only : gpt_only)
        WEFT_CHECK(option->count() == 0, ValueError, option->get_name(), " is not a flag of --model ", f->model);
      WEFT_CHECK(!gpt || f->optimizer == "adamw", ValueError, "--model gpt trains with adamw only");
      WEFT_CHECK(!gpt || f->schedule != "step", ValueError, "--model gpt has no step schedule: use cosine or constant");
      if (gpt) train_gpt(*f);
      else train_image_classifier(*f);
    };
  });

  auto json = std::make_shared<bool>(false);

  auto checkpoint = std::make_shared<std::string>();
  auto model = std::make_shared<std::string>();
  auto dataset = std::make_shared<std::string>(train::ClassifierOptions{}.dataset);
  auto data_dir = std::make_shared<std::string>(train::ClassifierOptions{}.data_dir);
  auto batch_size = std::make_shared<int64_t>(1000);
  auto threads = std::make_shared<int>(0);
  CLI::App* e = app.add_subcommand("eval", "accuracy and loss of a checkpoint on the test set");
  e->add_option("--checkpoint", *checkpoint, "model.safetensors or the directory holding it")->required();
  e->add_option("--model", *model, "mlp | cnn (default: what the checkpoint says)")->check(CLI::IsMember({"mlp", "cnn"}));
  e->add_option("--dataset", *dataset,
                "whose normalisation to assume for a checkpoint that does not record its own (older ones)")
      ->check(CLI::IsMember({"fashion-mnist", "mnist"}))->capture_default_str();
  e->add_option("--data-dir", *data_dir)->capture_default_str();
  e->add_option("--batch-size", *batch_size)->capture_default_str()->check(CLI::PositiveNumber);
  e->add_option("--threads", *threads)->capture_default_str();
  e->add_flag("--json", *json);
  e->callback([&run, checkpoint, model, dataset, data_dir, batch_size, threads, json] {
    run = [=] {
      if (*threads > 0) set_num_threads(*threads);
      eval(*checkpoint, {.model = *model, .dataset = *dataset}, *data_dir, *batch_size, *json);
    };
  });

  auto path = std::make_shared<std::string>();
  CLI::App* i = app.add_subcommand("info", "the tensors in a safetensors file and the model's size per number format");
  i->add_option("file", *path, "a .safetensors file or a checkpoint directory")->required();
  i->add_flag("--json", *json);
  i->callback([&run, path, json] { run = [=] { info(*path, *json); }; });
}

}  // namespace weft::cli
