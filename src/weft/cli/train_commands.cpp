#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "weft/amp/precision.h"
#include "weft/autograd/autocast_mode.h"
#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/allocator.h"
#include "weft/core/program.h"
#include "weft/core/threads.h"
#include "weft/data/dataset.h"
#include "weft/data/text.h"
#include "weft/dist/world.h"
#include "weft/infer/load.h"
#include "weft/infer/metadata.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/sharded_checkpoint.h"
#include "weft/monitor/progress.h"
#include "weft/monitor/status_file.h"
#include "weft/monitor/system.h"
#include "weft/nn/gpt.h"
#include "weft/nn/model_kind.h"
#include "weft/optim/kind.h"
#include "weft/train/checkpoint.h"
#include "weft/train/image_task.h"
#include "weft/train/trainer.h"

namespace weft::cli {

namespace {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * fraction);
  return buf;
}

void train(const train::TrainOptions& options, bool json) {
  const monitor::StatusPublisher published("train", nn::model_kind_name(options.model), "step");
  const train::TrainResult r = train::train(options, std::cout, monitor::stdout_is_terminal());
  if (dist::world().rank != 0) return;  // under mpirun, rank 0 speaks for the run
  if (!r.evaluation_line.empty()) std::cout << r.evaluation_line << "\n";
  const std::string stopped = r.hit_time_limit       ? ", stopped by --time-limit"
                              : !r.stopped_by.empty() ? ", stopped by " + r.stopped_by
                                                      : "";
  std::cout << "trained " << r.steps - r.start_step << (r.steps - r.start_step == 1 ? " step" : " steps") << " this run (" << (r.start_step ? "resumed at step " : "")
            << (r.start_step ? std::to_string(r.start_step) + ", " : "") << "now at step " << r.steps << " of "
            << r.planned_steps << " planned" << stopped << "), " << r.items << " " << r.items_name << ": "
            << static_cast<int64_t>(r.items_per_s) << " " << r.items_name << "/s; wall time " << r.wall_s << " s"
            << (options.time_limit > 0 ? str(" (--time-limit ", options.time_limit, ")") : "")
            << (r.final_evaluation_s > 0 ? str(", the final evaluation and save ", r.final_evaluation_s, " s") : "")
            << "\n"
            << "memory: allocator peak " << format_bytes(r.peak_allocated_bytes) << ", process peak RSS "
            << format_bytes(r.peak_rss_bytes) << "\n";
  if (options.precision == amp::Precision::fp16)
    std::cout << "fp16: " << r.skipped_steps << " steps skipped for inf/NaN gradients, final loss scale " << r.loss_scale
              << "\n";
  // What to do next, each a command that runs as printed (tests/cli/printed_hints_work.py runs them).
  if (!options.out_dir.empty()) {
    const std::string out = shell_quote(options.out_dir), weft = shell_quote(program_name());
    const bool sharded = options.zero_stage() > 0 || options.tensor_parallel() || options.pipeline_parallel();
    // A sharded checkpoint is read whole once merged, into a file beside the run's directory.
    const std::string model =
        sharded ? shell_quote(io::consolidated_file(options.out_dir)) : out;
    std::cout << "checkpoint: " << out << (sharded ? ", one shard per rank" : "")
              << "; metrics.jsonl and TensorBoard events beside it\n";
    if (sharded) std::cout << "  merge:     " << io::consolidate_command(options.out_dir) << "\n";
    if (options.is_image_task())
      std::cout << "  evaluate:  " << weft << " eval --checkpoint " << model
                << (options.image.own_data() ? " --data " + shell_quote(options.image.data) : std::string()) << "\n";
    else
      std::cout << "  sample:    " << weft << " generate --checkpoint " << model << " --prompt 'The '\n";
    // A run that reached its plan goes on only with a longer one; --steps counts from the start.
    const bool finished = r.steps == r.planned_steps;
    std::cout << (finished ? "  train on:  " : "  continue:  ")
              << train::train_command(str("--resume ", out, finished ? str(" --steps ", 2 * r.steps) : std::string()))
              << "\n"
              << "  logs:      " << weft << " board --logdir " << out << "\n";
  }
  if (json) std::cout << r.to_json().dump() << "\n";
}

void eval(const std::string& checkpoint, const infer::LoadOptions& options, const std::string& data_dir,
          const std::string& data, int64_t batch_size, bool json) {
  infer::LoadedModel loaded = infer::load_model(checkpoint, options);
  WEFT_CHECK(loaded.kind != nn::ModelKind::gpt, ValueError, checkpoint,
             " holds a GPT; weft eval measures the image classifiers (sample a GPT with weft generate)");
  if (!loaded.note.empty()) std::cerr << "note: " << loaded.note << "\n";
  const bool own = loaded.dataset == infer::kImageFolderDataset || loaded.dataset == infer::kTableDataset;
  WEFT_CHECK(!own || !data.empty(), ValueError, checkpoint, " was trained on ", loaded.dataset == infer::kTableDataset
             ? "a CSV table; pass the table to evaluate on with --data FILE.csv" : "an image folder; pass the folder "
             "to evaluate on (its test/ or val/, else all its images) with --data DIR");
  WEFT_CHECK(own || data.empty(), ValueError, "--data: ", checkpoint, " was trained on ", loaded.dataset,
             ", read from IDX files (--data-dir), not on a folder or table of its own");
  WEFT_CHECK(!own || data_dir.empty(), ValueError, "--data-dir: ", checkpoint, " was trained on its own data; ",
             "pass that with --data");
  std::shared_ptr<const data::Dataset> test_data =
      own ? train::own_evaluation_data(loaded, data)
          : std::make_shared<data::ImageDataset>(
                data::load_mnist_idx(infer::image_data_dir(loaded.dataset, data_dir), false, loaded.normalization));
  // The batches are f32; a bf16 model's linear and convolution layers take them through autocast.
  AutocastGuard low_precision(loaded.dtype);
  train::EvalResult r = train::evaluate_classifier(*loaded.model, *test_data, batch_size);
  const std::string& scheme = loaded.scheme;
  std::cout << nn::model_kind_name(loaded.kind) << (scheme == "none" ? "" : " (" + scheme + ")")
            << (loaded.dtype == DType::f32 ? "" : str(" (", dtype_name(loaded.dtype), ")")) << " on " << r.samples
            << (loaded.table ? " test rows" : " test images") << ": accuracy " << percent(r.accuracy) << ", loss "
            << r.loss << "\n";
  if (json)
    std::cout << nlohmann::json{{"model", nn::model_kind_name(loaded.kind)}, {"quantization", scheme},
                                {"accuracy", r.accuracy}, {"loss", r.loss}, {"samples", r.samples}, {"dtype", dtype_name(loaded.dtype)},
                                {"dataset", loaded.dataset}, {"assumed_normalization", !loaded.note.empty()}}.dump()
              << "\n";
}

// Each tensor, then what the same parameters take in each number format (parameters x bytes per element).
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

// A flag that takes one of a vocabulary's names (amp/precision.h, optim/kind.h); an unknown name
// is the vocabulary's ValueError, naming the flag.
template <typename T, typename Parse, typename Name>
CLI::Option* named_option(CLI::App* app, const std::string& flag, T& target, Parse parse, Name name,
                          const std::string& help) {
  return app
      ->add_option_function<std::string>(flag, [&target, parse](const std::string& value) { target = parse(value); },
                                         help)
      ->default_str(name(target));
}

// `weft train`: its flags, and the checks of their combination; `parsed` gets the options once the
// command line is read whole and they hold.
using ParsedTrainOptions = std::function<void(std::shared_ptr<const train::TrainOptions> options, bool json)>;
void add_train_command(CLI::App& app, ParsedTrainOptions parsed) {
  auto o = std::make_shared<train::TrainOptions>();
  auto json = std::make_shared<bool>(false);
  CLI::App* t = app.add_subcommand("train", "train an image classifier on Fashion-MNIST, or a GPT on text");
  named_option(t, "--model", o->model, nn::parse_model_kind, nn::model_kind_name, "mlp | cnn | gpt")
      ->check(one_of(nn::model_kind_names()));
  number_flag(t, "--steps", o->steps, "optimizer steps (instead of --epochs)");
  number_flag(t, "--epochs", o->epochs, "passes over the data, may be fractional (default: 2 for mlp and cnn, 1 for gpt)");
  number_flag(t, "--time-limit", o->time_limit,
              "seconds for the whole run, the final evaluation included; alone, it plans the step count (0: none)");
  number_flag(t, "--limit-train-batches", o->limit_train_batches, "an epoch is the first N batches (0: all)");
  number_flag(t, "--batch-size", o->batch_size, "samples per step (default: 128 images; 16 windows of --context tokens)");
  named_option(t, "--optimizer", o->optimizer, optim::parse_optimizer, optim::optimizer_name,
               "adamw | adam | momentum (SGD with momentum 0.9) | sgd");
  number_flag(t, "--lr", o->lr, "learning rate (default: adam(w) 4e-3 for mlp and cnn, 2e-3 for gpt; sgd 0.1)");
  number_flag(t, "--weight-decay", o->weight_decay,
              "adamw: decoupled (default 0.01; gpt 0.1); the others: an L2 penalty (default 0)");
  t->add_option("--schedule", o->schedule, "constant | step (x0.5 per epoch) | cosine (after a warmup, to zero at the end)")
      ->check(one_of({"constant", "step", "cosine"}))->capture_default_str();
  number_flag(t, "--warmup", o->warmup, "cosine's warmup steps (default: 0; gpt 10% of the steps, at most 100)");
  number_flag(t, "--clip-grad", o->clip_grad, "clip the gradients' total norm, 0: off (default: off; gpt 1)");
  named_option(t, "--precision", o->precision,
               [](const std::string& name) { return amp::parse_precision(name, amp::kTrainedPrecisions); },
               amp::precision_name, "bf16 and fp16: autocast with f32 master weights; fp16 adds loss scaling")
      ->type_name("{" + amp::precision_names(amp::kTrainedPrecisions, "|") + "}");
  t->add_flag("--master-weights", o->master_weights,
              "with bf16: the model and its gradients in bf16, f32 master weights in the optimizer (16 bytes "
              "per parameter with Adam)");
  number_flag(t, "--grad-accum", o->grad_accum, "micro-batches of batch-size / K per optimizer step");
  t->add_option("--parallel", o->parallel,
                "ddp (or dp): data parallel over the ranks of mpirun (the default there); zero1, zero2, zero3: also shard "
                "the optimizer states, then the gradients, then the parameters (ZeRO); tp: the GPT's layers split over "
                "groups of --tp ranks; pp: its blocks in --pp stages; combined as a list, dp,tp,pp or zero1,tp,pp, the "
                "ranks tp x pp leave are data-parallel replicas; --batch-size is the global batch")
      ->check(not_empty());
  number_flag(t, "--pp", o->pp, "--parallel pp: pipeline stages, a rank each (a divisor of the ranks, at most --layers)");
  t->add_option("--pp-schedule", o->pp_schedule,
                "--parallel pp: gpipe (every forward, then every backward) or 1f1b (default; at most --pp micro-batches "
                "in flight; needs --grad-accum >= --pp); the micro-batches are --grad-accum's")
      ->check(one_of({"gpipe", "1f1b"}));
  t->add_flag("--print-schedule", o->print_schedule, "--parallel pp: draw the pipeline's timeline and its bubble");
  number_flag(t, "--tp", o->tp, "--parallel tp: ranks per tensor-parallel group (a divisor of the ranks, of --heads "
                                "and of --vocab)");
  number_flag(t, "--bucket-mb", o->bucket_mb, "gradient bucket size in MiB (DDP, ZeRO, local SGD)");
  t->add_option("--grad-compress", o->grad_compress,
                "DDP: all-reduce the gradients in 16 bits (bf16 | fp16), summed in f32: half the bytes")
      ->check(one_of({"bf16", "fp16"}));
  number_flag(t, "--sync-every", o->sync_every,
              "DDP: local SGD, each rank steps alone and the parameters are averaged every K steps (fp32)");
  t->add_flag("--no-overlap{false}", o->ddp_overlap, "DDP: all-reduce the gradients after backward, not during it");
  number_flag(t, "--comm-timeout", o->comm_timeout,
              "DDP: seconds a collective may wait for the other ranks before each rank says where it waits and the "
              "job aborts; 0: never");
  t->add_flag("--checkpoint-activations", o->checkpoint_activations,
              "recompute activations in backward instead of keeping them");
  t->add_flag("--auto-batch", o->auto_batch,
              "on out-of-memory, halve the micro-batch and redo the step (the batch stays the same)");
  t->add_option_function<std::string>(
      "--memory-limit",
      [o](const std::string& text) {
        int64_t bytes = 0;
        try {
          bytes = parse_bytes(text);
        } catch (const ValueError&) {  // refused below, in the flags' format
        }
        WEFT_CHECK(bytes > 0, ValueError, "--memory-limit: must be a positive byte count below 2^63 such as 123, 1e9, ",
                   "1.5GB or 512MiB, got '", text, "'");
        o->memory_limit = bytes;
      },
      "cap the allocator, e.g. 512MiB (as WEFT_MEMORY_LIMIT)");
  number_flag(t, "--eval-every", o->eval_every,
              "steps between evaluations and checkpoints, 0: at the end (default: every epoch; gpt at the end)");
  number_flag(t, "--log-every", o->log_every, "steps between log records");
  t->add_option("--out", o->out_dir, "checkpoint, TensorBoard events and metrics.jsonl go here")->check(not_empty());
  t->add_option("--resume", o->resume_dir,
                "continue the run saved in this directory, in place unless --out names another; flags not given "
                "take the run's own (the model, data, batch, optimizer, precision; under mpirun its parallel layout)")
      ->check(not_empty());
  t->add_option("--init-from", o->init_from,
                "fine-tune: start a new run from the weights of this checkpoint (a weft train directory or its "
                ".safetensors), with a fresh optimizer and schedule; a GPT takes the checkpoint's shape")
      ->check(not_empty());
  t->add_option("--freeze", o->freeze,
                "parameters whose names match this regular expression are not trained (e.g. '^0\\.' or 'wte|wpe')")
      ->check(not_empty());
  t->add_option("--reinit", o->reinit,
                "with --init-from: tensors whose names match this regular expression keep a fresh initialisation "
                "and may differ in shape from the checkpoint's (a new head: e.g. '^head\\.')")
      ->check(not_empty());
  t->add_flag("--overwrite", o->overwrite,
              "start over in an --out that holds a run: deletes that run's checkpoint, metrics and events first");
  t->add_flag("--async-save", o->async_save,
              "write each checkpoint on a background thread while training goes on");
  number_flag(t, "--seed", o->seed, "the same seed gives the same run");
  number_flag(t, "--threads", o->threads, "0: all cores (or OMP_NUM_THREADS)");
  number_flag(t, "--prefetch", o->prefetch, "batches prepared ahead in the background");
  t->add_option("--profile", o->profile_trace,
                "record --profile-steps into this Chrome trace (Perfetto opens it) and print the top ops")
      ->check(not_empty());
  t->add_option_function<std::string>(
      "--profile-steps",
      [o](const std::string& range) {
        const size_t colon = range.find(':');
        try {
          if (colon != std::string::npos) {
            o->profile_first_step = parse_flag<int64_t>("--profile-steps", range.substr(0, colon));
            o->profile_last_step = parse_flag<int64_t>("--profile-steps", range.substr(colon + 1));
            return;
          }
        } catch (const ValueError&) {  // refused below, as the pair
        }
        throw ValueError(str("--profile-steps: must be FIRST:LAST, two step numbers, got '", range, "'"));
      },
      "FIRST:LAST, counted from 1, both included (default 2:4)");
  t->add_flag("--json", *json, "print the result as one JSON object on the last line");

  // --data and --val-fraction are both tasks': read into these, then into the task's options.
  auto data_paths = std::make_shared<std::vector<std::string>>();
  auto val_fraction = std::make_shared<std::optional<double>>();
  t->add_option("--data", *data_paths, "mlp and cnn: a folder of images, one subfolder per class (PNG, JPEG), or a "
                "CSV table (mlp) with a header row and a label column, instead of --dataset (docs/data.md); gpt: text "
                "files, directories of *.txt files (default: the fortunes), token shards of weft tokenize encode "
                "(their directory or .bin files), or random");
  number_flag(t, "--val-fraction", *val_fraction, "share held out for evaluation: mlp and cnn with --data, of each "
              "class, drawn by --seed (default 0.1; not when the folder has train/ and test/ or val/); gpt: of the "
              "documents (of a single document: its last tokens), 0: no validation (default 0.05)");
  std::vector<CLI::Option*> image_only = {
      t->add_option("--dataset", o->image.dataset, "the data set read, and whose normalisation statistics apply")
          ->check(one_of({"fashion-mnist", "mnist"}))->capture_default_str(),
      t->add_option("--data-dir", o->image.data_dir, kDataDirHelp),
      t->add_option_function<std::string>(
          "--image-size",
          [o](const std::string& text) {
            const size_t x = text.find('x');
            WEFT_CHECK(x != std::string::npos, ValueError, "--image-size: must be HxW such as 32x32, got '", text, "'");
            const Accepts<int64_t> side{.min = 1, .max = train::kMaxImageSide};
            o->image.image_size = {parse_flag<int64_t>("--image-size", text.substr(0, x), side),
                                   parse_flag<int64_t>("--image-size", text.substr(x + 1), side)};
          },
          "--data: resize every image (bilinear) to HxW pixels (default: the images' own size, which must then be "
          "the same for all)"),
      number_flag(t, "--channels", o->image.channels, "--data: 1 (grey) or 3 (RGB) (default: 3 when any image is in "
                  "colour, else 1)", {.min = 1, .max = 3}),
      t->add_option_function<std::string>(
          "--normalize",
          [o](const std::string& text) {
            o->image.normalize.clear();
            for (size_t begin = 0; begin <= text.size();) {
              const size_t comma = std::min(text.find(',', begin), text.size());
              o->image.normalize.push_back(parse_flag<double>("--normalize", text.substr(begin, comma - begin)));
              begin = comma + 1;
            }
          },
          "--data: the channels' means, then their stds, of pixel / 255: MEAN,STD or R,G,B,R,G,B (default: "
          "measured over the training images)"),
      t->add_option("--label-column", o->image.label_column, "--data FILE.csv: the column of the labels (default: "
                    "the last)")->check(not_empty())};
  train::TextOptions& text = o->text;
  std::vector<CLI::Option*> gpt_only = {
      number_flag(t, "--layers", text.layers, str("GPT: transformer blocks (default ", nn::GPTConfig{}.layers, ")")),
      number_flag(t, "--heads", text.heads, str("GPT: attention heads (default ", nn::GPTConfig{}.heads, ")")),
      number_flag(t, "--dim", text.dim, str("GPT: model width (default ", nn::GPTConfig{}.dim, ")")),
      number_flag(t, "--context", text.context, str("GPT: tokens per window (default ", nn::GPTConfig{}.context, ")")),
      number_flag(t, "--vocab", text.vocab, "GPT: vocabulary size (default: the tokenizer's)"),
      number_flag(t, "--dropout", text.dropout, "GPT: dropout probability"),
      t->add_option("--tokenizer", text.tokenizer, "GPT: byte (default), a SentencePiece model (weft tokenize "
                    "train) or a directory of GPT-2's vocab.json and merges.txt")
          ->check(not_empty()),
      number_flag(t, "--eval-windows", text.eval_windows, "GPT: validation windows per evaluation (0: all)")};
  t->callback([parsed, t, o, json, image_only, gpt_only, data_paths, val_fraction] {
    if (!o->resume_dir.empty()) {
      // The same run, in place: the resumed run's own options fill every flag not given.
      const bool launched_on_ranks = dist::launched_by_mpi() && dist::world().size > 1;
      o->inherit_unset(train::saved_run_options(o->resume_dir),
                       [t](const std::string& flag) { return t->get_option(flag)->count() > 0; }, launched_on_ranks);
      if (o->out_dir.empty()) o->out_dir = o->resume_dir;
      // The batch is the run's global batch on any number of ranks; one this launch's replicas
      // cannot share is refused as the run's, not as a flag the user never typed.
      const auto given = [t](const char* flag) { return t->get_option(flag)->count() > 0; };
      const int64_t replicas = std::max<int64_t>(1, dist::world().size / std::max<int64_t>(1, o->tp * o->pp));
      if (o->batch_size && !given("--batch-size")) {
        const int64_t batch = *o->batch_size;
        const std::string on = replicas == 1 ? std::string("one process")
                                             : str("the ", replicas, o->tp * o->pp > 1 ? " data-parallel replicas" : " ranks",
                                                   " of this launch");
        WEFT_CHECK(batch % replicas == 0, ValueError, "--resume ", o->resume_dir, ": the run's batch of ", batch,
                   " samples does not split over ", on, "; a resumed run keeps its batch, so that it goes on with "
                   "the same training: resume on a number of ranks that divides ", batch, ", or give --batch-size");
        WEFT_CHECK(batch / replicas % o->grad_accum == 0, ValueError, "--resume ", o->resume_dir, ": the run's batch of ",
                   batch, " samples, ", batch / replicas, " on each of ", on, ", does not make --grad-accum ",
                   o->grad_accum, " micro-batches", given("--grad-accum") ? "" : " (the run's)", "; resume on fewer "
                   "ranks, or give --grad-accum or --batch-size");
      }
    }
    for (CLI::Option* option : o->is_image_task() ? gpt_only : image_only)
      WEFT_CHECK(option->count() == 0, ValueError, option->get_name(), ": is not a flag of --model ",
                 nn::model_kind_name(o->model));
    if (!data_paths->empty() && o->is_image_task()) {
      WEFT_CHECK(data_paths->size() == 1, ValueError, "--data: mlp and cnn train on one folder of images or one CSV "
                 "table, got ", data_paths->size(), " paths");
      for (const char* flag : {"--dataset", "--data-dir"})
        WEFT_CHECK(t->get_option(flag)->count() == 0, ValueError, flag, ": is not a flag of --data (the data set is ",
                   (*data_paths)[0], ")");
      o->image.data = (*data_paths)[0];
    } else if (!data_paths->empty()) {
      o->text.data = *data_paths;
    }
    if (*val_fraction) {
      if (o->is_image_task()) o->image.val_fraction = *val_fraction;
      else o->text.val_fraction = **val_fraction;
    }
    if (o->text.data == std::vector<std::string>{"random"})
      for (const char* flag : {"--tokenizer", "--val-fraction"})
        WEFT_CHECK(t->get_option(flag)->count() == 0, ValueError, flag,
                   ": is not a flag of --data random (its tokens are drawn, not read: there is no text to tokenize "
                   "or to hold out)");
    const auto& data = o->text.data;
    WEFT_CHECK(t->get_option("--val-fraction")->count() == 0 ||
                   std::none_of(data.begin(), data.end(), data::is_token_shard_path),
               ValueError, "--val-fraction: is not a flag of token shards (weft tokenize encode --val-fraction split "
               "them into train.bin and val.bin)");
    o->validate();
    parsed(o, *json);
  });
}

}  // namespace

train::TrainOptions parse_train_flags(const std::vector<std::string>& args) {
  CLI::App app("weft");
  std::shared_ptr<const train::TrainOptions> options;
  add_train_command(app, [&options](std::shared_ptr<const train::TrainOptions> o, bool) { options = std::move(o); });
  std::vector<std::string> reversed = {"train"};
  reversed.insert(reversed.end(), args.begin(), args.end());
  std::reverse(reversed.begin(), reversed.end());  // CLI11 takes the arguments last first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    throw ValueError(error.what());
  }
  return *options;
}

void add_train_commands(CLI::App& app, std::function<void()>& run) {
  add_train_command(app, [&run](std::shared_ptr<const train::TrainOptions> o, bool json) {
    run = [o, json] { train(*o, json); };
  });
  auto json = std::make_shared<bool>(false);

  auto checkpoint = std::make_shared<std::string>();
  auto model = std::make_shared<std::optional<nn::ModelKind>>();
  auto dataset = std::make_shared<std::string>();
  auto data_dir = std::make_shared<std::string>();
  auto eval_data = std::make_shared<std::string>();
  auto batch_size = std::make_shared<int64_t>(1000);
  auto threads = std::make_shared<int>(0);
  CLI::App* e = app.add_subcommand("eval", "accuracy and loss of a checkpoint on the test set");
  e->add_option("--checkpoint", *checkpoint, "model.safetensors or the directory holding it")
      ->required()->check(not_empty());
  e->add_option_function<std::string>(
       "--model", [model](const std::string& name) { *model = nn::parse_model_kind(name); },
       "mlp | cnn (default: what the checkpoint says)")
      ->check(one_of({"mlp", "cnn"}));
  e->add_option("--dataset", *dataset, kCheckpointDatasetHelp)->check(one_of({"fashion-mnist", "mnist"}));
  e->add_option("--data-dir", *data_dir, kDataDirHelp);
  e->add_option("--data", *eval_data, "a checkpoint trained with weft train --data: the folder of images (its test/ "
                "or val/ when it has train/ and test/, else all its images) or the CSV table to evaluate on")
      ->check(not_empty());
  number_flag(e, "--batch-size", *batch_size, "test images per forward pass", {.min = 1, .max = train::kMaxCount});
  number_flag(e, "--threads", *threads, "0: all cores (or OMP_NUM_THREADS)", {.min = 0, .max = train::kMaxThreads});
  e->add_flag("--json", *json, "print the result as one JSON object on the last line");
  e->callback([&run, checkpoint, model, dataset, data_dir, eval_data, batch_size, threads, json] {
    run = [=] {
      if (*threads > 0) set_num_threads(*threads);
      eval(*checkpoint, {.model = *model, .dataset = *dataset}, *data_dir, *eval_data, *batch_size, *json);
    };
  });

  auto path = std::make_shared<std::string>();
  CLI::App* i = app.add_subcommand("info", "the tensors in a safetensors file and the model's size per number format");
  i->add_option("checkpoint,--checkpoint", *path, "a .safetensors file or a checkpoint directory")->required()->check(not_empty());
  i->add_flag("--json", *json, "print the result as one JSON object on the last line");
  i->callback([&run, path, json] { run = [=] { info(*path, *json); }; });

  auto sharded = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto overwrite = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("ckpt", "checkpoint tools: consolidate");
  c->require_subcommand(1);
  CLI::App* consolidate = c->add_subcommand(
      "consolidate", "merge a sharded checkpoint (weft train --parallel zero1|zero2|zero3) into one model file");
  consolidate->add_option("checkpoint,--checkpoint", *sharded, "the sharded checkpoint directory")->required()->check(not_empty());
  consolidate->add_option("--out", *out, "the .safetensors file to write (weft eval --checkpoint FILE reads it)")
      ->required()->check(not_empty());
  consolidate->add_flag("--overwrite", *overwrite, "replace --out if it exists");
  consolidate->callback([&run, sharded, out, overwrite] {
    run = [=] {
      // The shards, through DIR's links and in the current step directory (a layout older than
      // step directories holds them in DIR itself).
      std::error_code error;
      for (const std::string& dir : {*sharded, io::current_checkpoint(*sharded)})
        for (const auto& entry : std::filesystem::directory_iterator(dir, error)) io::mark_as_input(entry.path().string());
      check_output_file("--out", *out, *overwrite);
      train::consolidate_checkpoint(*sharded, *out);
      std::cout << "wrote " << *out << "\n";
    };
  });
}

}  // namespace weft::cli
