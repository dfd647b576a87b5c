// TrainOptions: everything `weft train` can be told, for every task, in one type that the CLI
// parses once (src/weft/cli/train_commands.cpp) and the trainer (train/trainer.h) reads.
//
// The options every task shares come first; each task's own ones sit in their own struct below.
// An option left unset (std::nullopt) takes the task's default, which the task states beside
// its definition (train/task.h); a value the user gave is used as given or refused with a
// ValueError naming the flag, never replaced. validate() is that refusal, in the format of
// core/flag_value.h; the bounds below are part of it.
#pragma once
#include <regex.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/amp/precision.h"
#include "weft/nn/model_kind.h"
#include "weft/optim/kind.h"

namespace weft::train {

// The largest values the options take: more than any run here finishes, and small enough that
// what the trainer multiplies (planned steps, batches per epoch, tokens per batch) fits int64.
inline constexpr int64_t kMaxSteps = 1'000'000'000'000;  // --steps, and what --epochs or --time-limit plan
inline constexpr int64_t kMaxCount = int64_t{1} << 30;    // a batch, a GPT's sizes, steps between logs
// --threads and --prefetch, for every command that takes them: a fixed bound rather than a multiple
// of this machine's cores, so that a command line means the same on every machine; above any CPU's
// hardware threads here, and far below the 100000 at which weft crashed (SIGSEGV) starting them.
inline constexpr int kMaxThreads = 1024;

// The largest side --image-size takes: far above any image a classifier here is trained on.
inline constexpr int64_t kMaxImageSide = 16384;

// --model mlp | cnn: a classifier of 28x28 grey images (Fashion-MNIST or MNIST in IDX files), or
// of the user's own data (--data): a folder of images, one subfolder per class
// (data/image_folder.h), or a CSV table (data/table.h) for the mlp (docs/data.md).
struct ImageOptions {
  std::string dataset = "fashion-mnist";  // fashion-mnist | mnist: the files read and their normalisation
  std::string data_dir;                   // "": the data set's own (infer::image_data_dir)
  // --data: a folder (images) or a file (a CSV table) instead of --dataset; "": --dataset.
  std::string data;
  std::vector<int64_t> image_size;  // --image-size HxW: {H, W}; empty: the images' own (all alike)
  int64_t channels = 0;             // --channels 1 | 3; 0: 3 when any image is in colour, else 1
  std::vector<double> normalize;    // --normalize: C means, then C stds (of pixel / 255); empty: measured
  std::string label_column;         // a table's; "": its last column
  // Held out of each class for evaluation, drawn by --seed (data/split.h), when the data has no
  // held-out part of its own (a folder's train/ and test/ or val/). Unset: kDefaultValFraction.
  std::optional<double> val_fraction;
  static constexpr double kDefaultValFraction = 0.1;

  bool own_data() const { return !data.empty(); }
  bool is_table() const;  // --data names something other than a folder
};

// --model gpt: a GPT learning the next token of a text corpus (docs/gpt.md).
struct TextOptions {
  // The architecture. Unset: the checkpoint's when resuming, otherwise nn::GPTConfig's defaults
  // and the tokenizer's vocabulary. A value given is checked as given.
  std::optional<int64_t> layers, heads, dim, context, vocab;
  double dropout = 0;
  std::string tokenizer;          // "byte" or a SentencePiece model file; "": the checkpoint's when resuming, else byte
  std::vector<std::string> data;  // text files or directories (default: the fortunes), or {"random"}
  double val_fraction = 0.05;     // of the documents, or of the tokens (data/text.h); 0: no validation
  int64_t eval_windows = 0;       // validation windows per evaluation; 0: all of them
};

// The expression of --freeze or --reinit, compiled: which parameter names it finds. ValueError
// naming `flag` when it is not a regular expression.
class NamePattern {
 public:
  NamePattern(const char* flag, const std::string& pattern);
  ~NamePattern();
  NamePattern(const NamePattern&) = delete;
  NamePattern& operator=(const NamePattern&) = delete;
  bool matches(const std::string& name) const;

 private:
  regex_t compiled_;
};

struct TrainOptions {
  nn::ModelKind model = nn::ModelKind::cnn;  // which task

  // How long. The first of these that is set decides: --steps, --epochs (may be fractional),
  // the resumed run's own plan, --time-limit (the first steps' speed sets the step count);
  // else the task's default epochs. A time limit also stops a run that would exceed it.
  std::optional<int64_t> steps;
  std::optional<double> epochs;
  double time_limit = 0;  // seconds of training (evaluation included); 0: none
  int64_t limit_train_batches = 0;  // 0: every batch; otherwise an epoch is the first N batches

  // The update.
  std::optional<int64_t> batch_size;  // samples per optimizer step
  // adamw | adam | momentum (SGD, momentum 0.9) | sgd: the names weft plan prices (optim/kind.h)
  optim::OptimizerKind optimizer = optim::OptimizerKind::adamw;
  std::optional<double> lr;
  std::optional<double> weight_decay;  // adamw: decoupled (default: the task's); the others: an L2 penalty (default 0)
  std::string schedule = "cosine";     // constant | step (x0.5 each epoch) | cosine (after a warmup, to zero at the end)
  std::optional<int64_t> warmup;       // cosine's linear warmup, in steps
  std::optional<double> clip_grad;     // the gradients' total norm; 0: off

  // Precision and memory (docs/mixed-precision.md). fp32 | bf16 | fp16: bf16 and fp16 run the
  // forward under autocast with f32 master weights; fp16 adds dynamic loss scaling.
  amp::Precision precision = amp::Precision::fp32;
  // With bf16: the model's parameters and gradients in bf16, the f32 master weights and the Adam
  // states in the optimizer (2 + 2 + 12 bytes per parameter, the ZeRO paper's layout) instead of
  // autocast over f32 parameters (4 + 4 + 8, and 2 for the bf16 copies the forward reads).
  bool master_weights = false;
  // Parallelism over the ranks of an MPI launch, a comma-separated list: "" (under mpirun with
  // more than one rank: ddp); for the data-parallel replicas ddp (or dp) or zero1 | zero2 | zero3
  // (dist/zero.h); tp, the GPT's layers split over groups of `tp` ranks (dist/tensor_parallel.h);
  // pp, its blocks in `pp` stages (dist/pipeline.h). "dp,tp,pp" combines them (ZeRO-1 on top:
  // "zero1,tp,pp"): the ranks that tp x pp do not take are data-parallel replicas, ranks / (tp pp)
  // of them. --batch-size is the global batch, each replica takes batch-size / replicas.
  std::string parallel;
  int64_t tp = 1;  // --tp: ranks per tensor-parallel group
  // pp: the step's --grad-accum micro-batches flow through the stages by `pp_schedule`, gpipe | 1f1b.
  int64_t pp = 1;
  std::string pp_schedule = "1f1b";
  bool print_schedule = false;  // draw the pipeline's timeline at the start
  // Communicating less under DDP: gradients all-reduced in 16 bits ("bf16" | "fp16"; "": their
  // own), or local SGD, parameters averaged every `sync_every` steps instead of gradients every step.
  std::string grad_compress;
  int64_t sync_every = 1;
  int64_t bucket_mb = 25;  // DDP's and ZeRO-1/2's gradient buckets
  bool ddp_overlap = true;  // all-reduce buckets during backward (false: after it, to measure the overlap)
  double comm_timeout = 300;  // seconds a collective may wait before the watchdog reports and aborts; 0: never
  int64_t grad_accum = 1;               // micro-batches per step; must divide the batch size
  bool checkpoint_activations = false;  // recompute activations in backward instead of keeping them
  bool auto_batch = false;   // on OutOfMemoryError: halve the micro-batch, redo the step (and evaluation)
  int64_t memory_limit = 0;  // bytes the allocator may hold; 0 leaves WEFT_MEMORY_LIMIT or none

  // Evaluation, logs, checkpoints.
  std::optional<int64_t> eval_every;  // steps between evaluations (and checkpoints with --out); 0: only at the end
  int64_t log_every = 50;             // steps between log records (TensorBoard, metrics.jsonl, plain progress)
  std::string out_dir;                // "": no checkpoint or logs
  std::string resume_dir;             // "": start fresh
  // Fine-tuning: a new run (fresh optimizer, schedule and step count) whose model starts from the
  // weights of a checkpoint weft train wrote (what weft eval takes), its own GPT shape included.
  std::string init_from;
  // A regular expression (POSIX extended, as grep -E's, found anywhere in each name): the
  // parameters it matches are not trained; they keep their values bit for bit. One process only.
  std::string freeze;
  // With --init-from: the tensors it matches (same expressions as --freeze) keep the new model's
  // initialisation instead of the checkpoint's values, and may differ from the checkpoint's in
  // shape: a new head for another number of classes.
  std::string reinit;
  // --out on a directory that holds another run is refused unless this is set, and then the old
  // run's files (checkpoints, metrics, events) are deleted first; other files there are kept.
  bool overwrite = false;
  // Checkpoints written by a thread of their own while training goes on (train/checkpoint.h's
  // CheckpointSaver); one-process checkpoints only. Off: each save holds the step until it is on disk.
  bool async_save = false;

  // Profiling (docs/profiler.md): steps first..last (counted from 1, both included) are recorded
  // into a Chrome trace at `profile_trace`, and a table of the ops is printed at the end. The
  // default, steps 2 to 4 as far as the run goes, skips the first step, which warms caches and
  // the allocator up; a range given must lie within the run.
  std::string profile_trace;  // "": no profiling
  std::optional<int64_t> profile_first_step, profile_last_step;

  // The machine.
  uint64_t seed = 0;
  int threads = 0;   // 0: leave weft's default
  int prefetch = 2;  // batches the loader prepares ahead in the background

  ImageOptions image;
  TextOptions text;

  bool is_image_task() const { return nn::is_image_classifier(model); }
  bool tensor_parallel() const { return tp > 1; }
  bool pipeline_parallel() const { return pp > 1; }
  int zero_stage() const;  // 1 to 3 for --parallel zeroN[,...], else 0
  // Every field against what its flag accepts: ValueError naming the first flag that is not. The
  // CLI calls it as soon as the flags are parsed, train() before it reads anything.
  void validate() const;
  // validate()'s part for --data's own data and the flags that only it takes.
  void validate_own_data() const;
  nlohmann::json to_json() const;
  // What every rank of a launch must be given alike, as [flag, value] pairs (null: not given), in
  // the order of the fields above; train() refuses a launch whose ranks differ in one, naming it.
  // The rule: a field is agreed when a rank given another value would compute something else and
  // have it averaged with the others, or issue other collectives and hang. So the model and every
  // size and probability of it, the data, its split and order (the seed), how long the run is
  // and when it evaluates and saves, the batch and its micro-batches, the optimizer, its schedule
  // and clipping, the precision, the parallel layout with its buckets and compression, and the
  // directories every rank reads or writes its shard in. Left to each rank is what touches only
  // its own machine or rank 0's output: --threads, --prefetch, --memory-limit (under --auto-batch
  // the ranks agree on the micro-batch after an out-of-memory), --comm-timeout, --log-every,
  // --print-schedule, --profile and --profile-steps (rank 0 alone records), --overwrite (rank 0
  // alone deletes).
  nlohmann::json agreed_across_ranks() const;
  // Resuming continues the same run: every option of the run itself (the model, its data, the
  // batch, the optimizer and its schedule, the precision) that `given(flag)` says was not on the
  // command line takes its value from the checkpoint's recorded options (`saved`, to_json()'s
  // form). How long to train and the machine's settings are not inherited: a resumed run keeps its
  // own plan of steps (train/trainer.cpp). The parallel layout is, with `keep_layout` (a launch of
  // several ranks); one process resumes any layout's checkpoint whole.
  void inherit_unset(const nlohmann::json& saved, const std::function<bool(const std::string& flag)>& given,
                     bool keep_layout);
};

}  // namespace weft::train
