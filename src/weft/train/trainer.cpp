#include "weft/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "weft/amp/grad_scaler.h"
#include "weft/autograd/autocast_mode.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/flag_value.h"
#include "weft/core/random.h"
#include "weft/core/program.h"
#include "weft/core/threads.h"
#include "weft/data/dataloader.h"
#include "weft/dist/parallel_plan.h"
#include "weft/dist/world.h"
#include "weft/infer/load.h"
#include "weft/io/atomic_file.h"
#include "weft/io/dir_lock.h"
#include "weft/io/json.h"
#include "weft/kernels/cpu/roofline.h"
#include "weft/monitor/profiler.h"
#include "weft/monitor/progress.h"
#include "weft/monitor/status_file.h"
#include "weft/monitor/system.h"
#include "weft/ops/loss.h"
#include "weft/optim/adam.h"
#include "weft/optim/clip.h"
#include "weft/optim/schedule.h"
#include "weft/optim/sgd.h"
#include "weft/train/checkpoint.h"
#include "weft/train/step.h"
#include "weft/train/stop_signals.h"
#include "weft/train/task.h"

namespace weft::train {

namespace {

// Test-only fault injection, as WEFT_FAULT_AT (io/fault.h) is for saves: WEFT_FAULT_RANK=R:S makes
// rank R stop responding before step S, as a rank stuck in a deadlock or on a dead mount would (the
// other ranks' watchdog, --comm-timeout, must report it), and R:S:kill kills it there as SIGKILL
// would (the launch must end and the last checkpoint stay whole). Unset: nothing.
void fail_rank_if_asked(int rank, int64_t step) {
  struct Fault {
    int rank;
    long long step;
    bool kill;
  };
  static const std::optional<Fault> fault = []() -> std::optional<Fault> {
    const char* text = std::getenv("WEFT_FAULT_RANK");
    Fault f{};
    char mode[8] = {};
    const int fields = text == nullptr ? 0 : std::sscanf(text, "%d:%lld:%7s", &f.rank, &f.step, mode);
    if (fields < 2) return std::nullopt;
    f.kill = std::string(mode) == "kill";
    return f;
  }();
  if (!fault || fault->rank != rank || fault->step != step) return;
  if (fault->kill) std::raise(SIGKILL);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// The directories `weft train --out` creates, removed again when the run is refused before it
// writes anything there (the lock file alone is not output): a refused run leaves no trace.
class UnlessWrittenTo {
 public:
  explicit UnlessWrittenTo(const std::string& dir) {
    std::error_code error;
    for (std::filesystem::path p = std::filesystem::absolute(dir, error); !p.empty() && !std::filesystem::exists(p, error);
         p = p.parent_path())
      created_.push_back(p);
  }
  ~UnlessWrittenTo() {
    if (created_.empty() || std::uncaught_exceptions() == 0) return;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(created_.front(), error))
      if (entry.path().filename() != io::DirectoryLock::kFileName) return;  // the run wrote there
    std::filesystem::remove(created_.front() / io::DirectoryLock::kFileName, error);
    for (const std::filesystem::path& dir : created_)
      if (!std::filesystem::remove(dir, error)) return;
  }

 private:
  std::vector<std::filesystem::path> created_;  // innermost first
};

// --resume DIR --out DIR continues a run in place; the two spellings of one directory count too.
bool same_directory(const std::string& a, const std::string& b) {
  std::error_code error;
  return !a.empty() && !b.empty() && (a == b || std::filesystem::equivalent(a, b, error));
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, const TaskDefaults& d, double lr,
                                                 std::vector<Tensor> params) {
  // The task's weight decay is AdamW's decoupled one; the others take an L2 penalty only when asked.
  const double decay = o.weight_decay.value_or(o.optimizer == optim::OptimizerKind::adamw ? d.weight_decay : 0);
  switch (o.optimizer) {
    case optim::OptimizerKind::sgd:
      return std::make_unique<optim::SGD>(std::move(params), lr, optim::SGDOptions{.weight_decay = decay});
    case optim::OptimizerKind::momentum:
      return std::make_unique<optim::SGD>(std::move(params), lr,
                                          optim::SGDOptions{.momentum = 0.9, .weight_decay = decay});
    case optim::OptimizerKind::adam:
      return std::make_unique<optim::Adam>(
          std::move(params), optim::AdamOptions{.lr = lr, .beta1 = 0.9, .beta2 = d.beta2, .weight_decay = decay});
    case optim::OptimizerKind::adamw:
      return std::make_unique<optim::AdamW>(
          std::move(params), optim::AdamWOptions{.lr = lr, .beta1 = 0.9, .beta2 = d.beta2, .weight_decay = decay});
  }
  throw ValueError("unknown optimizer");
}

// Cosine's horizon is the planned steps, so resuming with another plan re-plans it (the rate
// rises again); constant and step depend only on the step, so a run extended by resuming equals
// a longer run.
std::unique_ptr<optim::LRSchedule> make_schedule(const std::string& name, double lr, int64_t warmup,
                                                 int64_t planned_steps, int64_t steps_per_epoch) {
  if (name == "constant") return std::make_unique<optim::ConstantLR>(lr);
  if (name == "step") return std::make_unique<optim::StepLR>(lr, steps_per_epoch, 0.5);
  return std::make_unique<optim::CosineWarmupLR>(lr, std::min(warmup, planned_steps), planned_steps);
}

// The step count the checkpointed run planned; classifier checkpoints written before the plan was
// saved hold only their whole --epochs (bounded, so that the product cannot overflow). 0 when
// neither is there.
int64_t saved_planned_steps(const nlohmann::json& options, int64_t steps_per_epoch, const std::string& where) {
  if (options.contains("planned_steps")) return io::json_integer(options, "planned_steps", where, 0, kMaxSteps);
  if (options.contains("epochs") && options["epochs"].is_number_integer())
    return io::json_integer(options, "epochs", where, 0, kMaxSteps / steps_per_epoch) * steps_per_epoch;
  return 0;
}

// Records the steps --profile-steps names: the profiler, and a module scope around every module's
// forward through forward hooks registered from named_modules (the root under the model's name).
class StepProfiler {
 public:
  StepProfiler(const TrainOptions& o, int64_t planned_steps, nn::Module& model, const std::string& model_name)
      : first_(std::min(o.profile_first_step.value_or(2), planned_steps)),
        last_(std::min(o.profile_last_step.value_or(4), planned_steps)) {
    for (auto& [name, module] : model.named_modules()) {
      names_.push_back(name.empty() ? model_name : name);
      const char* scope = names_.back().c_str();
      hooks_.push_back(module->register_forward_pre_hook([scope](nn::Module&, const Tensor&) -> std::optional<Tensor> {
        monitor::begin_module(scope);
        return std::nullopt;
      }));
      hooks_.push_back(module->register_forward_hook([](nn::Module&, const Tensor&, const Tensor&) -> std::optional<Tensor> {
        monitor::end_module();
        return std::nullopt;
      }));
    }
  }
  ~StepProfiler() {
    for (RemovableHandle& hook : hooks_) hook.remove();
  }
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around step `step` (counted from 0): starts recording before the first profiled one and
  // stops after the last.
  bool covers(int64_t step) const { return step + 1 >= first_ && step + 1 <= last_; }
  void before(int64_t step) {
    if (covers(step) && !profiler_.running()) profiler_.start();
  }
  void after(int64_t step, double seconds) {
    if (!covers(step)) return;
    measured_s_ += seconds;
    if (step + 1 == last_) profiler_.stop();
  }

  // Writes the trace, measures the machine's roofline and prints the top ops and the time by op
  // family on `log`.
  nlohmann::json finish(const std::string& trace, std::optional<DType> low_precision, std::ostream& log) {
    profiler_.stop();
    profiler_.write_trace(trace);
    const cpu::RooflineFigures figures = cpu::measure_roofline();
    const monitor::Roofline roofline = cpu::roofline_for(figures, low_precision.value_or(DType::f32));
    const std::vector<monitor::OpStats> rows = profiler_.key_averages(roofline);
    log << "profile of steps " << first_ << "-" << last_ << " (" << profiler_.step_ms() << " ms in the profiler's step "
        << "scopes, " << 1e3 * measured_s_ << " ms by the trainer's clock), trace in " << trace << "\n"
        << monitor::Profiler::table(rows, roofline);
    const std::vector<monitor::FamilyStats> families = profiler_.family_breakdown();
    log << "time by op family, per step (net of allocator calls; framework: in no op)\n"
        << monitor::Profiler::family_table(per_step(families));
    return {{"trace", trace}, {"first_step", first_}, {"last_step", last_}, {"step_ms", profiler_.step_ms()},
            {"measured_step_ms", 1e3 * measured_s_},
            {"roofline", {{"peak_gflops", roofline.peak_gflops}, {"bandwidth_gbs", roofline.bandwidth_gbs}}},
            {"ops", monitor::Profiler::to_json(rows)},
            {"families", monitor::Profiler::to_json(per_step(families))}};
  }

 private:
  std::vector<monitor::FamilyStats> per_step(std::vector<monitor::FamilyStats> rows) const {
    const double steps = static_cast<double>(last_ - first_ + 1);
    for (monitor::FamilyStats& r : rows) {
      r.ms /= steps;
      r.calls = static_cast<int64_t>(static_cast<double>(r.calls) / steps + 0.5);
    }
    return rows;
  }

  int64_t first_, last_;
  monitor::Profiler profiler_;
  std::deque<std::string> names_;  // a deque: the hooks keep pointers into it
  std::vector<RemovableHandle> hooks_;
  double measured_s_ = 0;
};

std::string fixed(double value, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

// An agreed option's value as the user gave it: "not given" for a flag left out.
std::string shown_value(const nlohmann::json& value) {
  if (value.is_null() || value == false || value == "" || value == nlohmann::json::array()) return "not given";
  if (value == true) return "given";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return shortest(value.get<double>());
  if (!value.is_array()) return value.dump();
  std::string words;
  for (const nlohmann::json& word : value) words += str(words.empty() ? "" : " ", shown_value(word));
  return words;
}

// Every rank's TrainOptions::agreed_across_ranks(), gathered to every rank, so that all of them
// name the same first flag that differs (and the lowest rank that differs in it) and refuse alike.
void refuse_ranks_that_disagree(const TrainOptions& options, dist::ProcessGroup& group) {
  const std::string mine = options.agreed_across_ranks().dump();
  const int world = group.size();
  Tensor lengths = Tensor::empty({world}, DType::i64);
  group.all_gather(Tensor::scalar(static_cast<double>(mine.size()), DType::i64), lengths);
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<uint8_t> padded(static_cast<size_t>(longest), 0);
  std::copy(mine.begin(), mine.end(), padded.begin());
  Tensor texts = Tensor::empty({world, longest}, DType::u8);
  group.all_gather(Tensor::from_vector(padded, {longest}), texts);
  const std::vector<uint8_t> bytes = texts.to_vector<uint8_t>();
  std::vector<nlohmann::json> ranks;
  for (int r = 0; r < world; ++r) {
    const auto begin = bytes.begin() + r * longest;
    ranks.push_back(nlohmann::json::parse(begin, begin + sizes[static_cast<size_t>(r)]));
  }
  for (size_t i = 0; i < ranks[0].size(); ++i)
    for (int r = 1; r < world; ++r) {
      nlohmann::json& theirs = ranks[static_cast<size_t>(r)][i];
      if (theirs == ranks[0][i]) continue;
      throw ValueError(str(ranks[0][i][0].get<std::string>(), " differs across ranks: ", shown_value(ranks[0][i][1]),
                           " on rank 0, ", shown_value(theirs[1]), " on rank ", r,
                           "; every rank of a launch trains the same model on the same data, with the same flags"));
    }
}

}  // namespace

Tensor summed_cross_entropy(const Tensor& outputs, const Tensor& targets) {
  return cross_entropy(outputs, targets, Reduction::sum);
}

std::unique_ptr<Task> make_task(const TrainOptions& o, std::ostream& log) {
  return o.is_image_task() ? make_image_task(o, log) : make_language_task(o, log);
}

const TaskDefaults& task_defaults(nn::ModelKind model) {
  return nn::is_image_classifier(model) ? image_task_defaults() : language_task_defaults();
}

nlohmann::json TrainResult::to_json() const {
  nlohmann::json j = {{"model", model}, {"params", params}, {"steps", steps}, {"start_step", start_step},
                      {"planned_steps", planned_steps},
                      {items_name, items}, {"train_" + items_name + "_per_s", items_per_s},
                      {"train_loss", train_loss}, {"wall_s", wall_s},
                      {"final_evaluation_s", final_evaluation_s},
                      {"peak_allocated_bytes", peak_allocated_bytes}, {"peak_rss_bytes", peak_rss_bytes},
                      {"steps_peak_allocated_bytes", steps_peak_allocated_bytes},
                      {"batch_size", batch_size}, {"micro_batch", micro_batch}, {"skipped_steps", skipped_steps},
                      {"hit_time_limit", hit_time_limit}, {"stopped_by", stopped_by}};
  if (loss_scale > 0) j["loss_scale"] = loss_scale;
  if (!profile.is_null()) j["profile"] = profile;
  j.update(setup);
  j.update(task);
  if (!evaluation.is_null()) j.update(evaluation);  // none when a signal stopped the run
  return j;
}

std::string train_command(const std::string& args) {
  const dist::World& w = dist::world();
  std::string launch;
  // Open MPI refuses root unless told, as this launch was (by the flag or its two variables).
  if (w.size > 1)
    launch = str("mpirun", geteuid() == 0 ? " --allow-run-as-root" : "", " -np ", w.size,
                 w.local_size > static_cast<int>(std::thread::hardware_concurrency()) ? " --oversubscribe " : " ");
  return str(launch, shell_quote(program_name()), " train ", args);
}

namespace {

// The parameters that take a gradient (--freeze leaves the others without one).
std::vector<Tensor> trainable(std::vector<Tensor> params) {
  std::erase_if(params, [](const Tensor& p) { return !p.requires_grad(); });
  return params;
}

// What the parallel plan (dist/parallel_plan.h) takes of the options.
dist::ParallelOptions parallel_options(const TrainOptions& o) {
  return {.parallel = o.parallel, .zero_stage = o.zero_stage(), .tp = static_cast<int>(o.tp),
          .pp = static_cast<int>(o.pp), .pp_schedule = dist::parse_pipeline_schedule(o.pp_schedule),
          .micro_batches = o.grad_accum, .bucket_bytes = o.bucket_mb << 20, .overlap = o.ddp_overlap,
          .grad_compress = o.grad_compress, .sync_every = o.sync_every};
}

// Refuses what cannot be launched as asked, before anything is loaded.
void check_launch(const TrainOptions& options, dist::ProcessGroup& group) {
  options.validate();
  // Data parallelism: under an MPI launch of more than one rank (or --parallel ddp), every rank
  // trains a copy of the model on its share of each batch, and rank 0 alone writes and prints.
  const bool distributed = group.size() > 1;
  const std::string parallel_flag = !options.parallel.empty()      ? str("--parallel ", options.parallel)
                                    : !options.grad_compress.empty() ? str("--grad-compress ", options.grad_compress)
                                    : options.sync_every > 1         ? str("--sync-every ", options.sync_every)
                                                                     : "";
  WEFT_CHECK(parallel_flag.empty() || distributed, ValueError, parallel_flag,
             ": trains over the ranks of an MPI launch, and this is ",
             dist::launched_by_mpi() ? "a launch of one rank" : "a single process", "; run it under mpirun -np N");
  // An out-of-memory on one rank makes every rank redo the step at half the micro-batch; under
  // ZeRO-2 and 3 the failed rank would have every micro-batch's collectives to replay.
  WEFT_CHECK(options.zero_stage() < 2 || !options.auto_batch, ValueError, "--auto-batch: not under --parallel ",
             options.parallel, " yet (it works with ddp and zero1)");
  // Every rank must run the same training: a rank started with other flags would train another
  // model or read other data, have it averaged with the others', or wait in a collective the
  // others never issue. Nothing is loaded before the ranks agree.
  if (distributed) refuse_ranks_that_disagree(options, group);
}

// --out: the directory is the run's before anything is read or written, for the whole run.
class OutputDirectory {
 public:
  OutputDirectory(const TrainOptions& o, std::ostream& log) {
    if (o.out_dir.empty()) return;
    created_.emplace(o.out_dir);
    std::error_code error;
    std::filesystem::create_directories(o.out_dir, error);
    if (const std::optional<std::string> why = io::why_not_writable_directory(o.out_dir))
      throw ValueError(str("--out ", o.out_dir, ": ", *why));
    if (error) throw IOError(str("cannot create --out directory ", o.out_dir, ": ", error.message()));
    lock_.emplace(o.out_dir, str("weft train --model ", nn::model_kind_name(o.model)));
    if (same_directory(o.resume_dir, o.out_dir)) return;
    // Another run's files are never replaced unasked: its checkpoint, metrics and events.
    const std::vector<std::string> found = run_files(o.out_dir);
    std::string what;
    for (const auto& [file, kind] : {std::pair{"latest", "a checkpoint"}, {"model.safetensors", "a checkpoint"},
                                     {"metrics.jsonl", "metrics.jsonl"}, {"events.out.tfevents.", "TensorBoard events"}})
      if (std::any_of(found.begin(), found.end(), [prefix = file](const std::string& f) { return f.starts_with(prefix); }) &&
          what.find(kind) == std::string::npos)
        what += str(what.empty() ? "" : ", ", kind);
    // Only a checkpoint can be continued; the logs of a run that saved none can only be replaced.
    const bool resumable = what.starts_with("a checkpoint");
    WEFT_CHECK(found.empty() || o.overwrite, ValueError, "--out ", o.out_dir, ": holds ",
               resumable ? "a run already (" : "the logs of a run that saved no checkpoint (",
               what.empty() ? found.front() : what, "); ",
               resumable ? str("continue it with ", train_command("--resume " + shell_quote(o.out_dir)), ", or ")
                         : std::string(),
               "pass --overwrite to delete ", resumable ? "that run" : "them", " and start a new one there");
    if (o.overwrite && !found.empty()) {
      run_files(o.out_dir, /*remove=*/true);
      log << "--overwrite: deleted the run in " << o.out_dir << "\n";
    }
  }

 private:
  std::optional<UnlessWrittenTo> created_;
  std::optional<io::DirectoryLock> lock_;
};

// The task loads its data: a memory limit below what that alone takes is no matter of batch size.
std::unique_ptr<Task> load_task(const TrainOptions& o, std::ostream& log) {
  try {
    return make_task(o, log);
  } catch (const OutOfMemoryError& error) {
    const int64_t limit = CachingAllocator::cpu().memory_limit();
    if (limit == 0) throw;
    throw OutOfMemoryError(str("the memory limit of ", format_bytes(limit),
                               o.memory_limit > 0 ? " (--memory-limit)" : " (WEFT_MEMORY_LIMIT)",
                               " is below what the training data itself needs: loading it could not allocate ",
                               format_bytes(error.requested_bytes), " more; raise the limit"),
                           error.requested_bytes);
  }
}

// One run of train(): what its setup builds, and the pieces of the loop that evaluate, save and
// log. Nothing here branches on the parallel mode: the plan stands for it.
struct Run {
  const TrainOptions& given;  // as every rank was given them
  std::ostream nowhere{nullptr};
  TrainOptions o;  // this rank's: only rank 0 writes --out and the profile
  dist::ProcessGroup& group;
  int rank;
  bool distributed;
  std::ostream& log;
  bool interactive;
  dist::ParallelPlan plan;
  std::optional<OutputDirectory> out;
  std::unique_ptr<Task> task;
  const CustomModel* custom;
  const std::string model_name = custom ? custom->name : nn::model_kind_name(o.model);  // as checkpoints record it; a resume checks it
  double lr = 0, clip_grad = 0;
  int64_t batch_size = 0, rank_batch = 0, micro_batch = 0, whole_params = 0;
  std::shared_ptr<nn::Module> model;
  const std::optional<DType> low_precision = amp::compute_dtype(o.precision);
  std::unique_ptr<optim::Optimizer> optimizer;
  OptimizerStateIO optimizer_io;
  std::optional<amp::GradScaler> scaler;
  std::optional<optim::BackwardGradNorm> backward_norm;
  std::shared_ptr<const data::Sampler> sampler;
  std::optional<data::DataLoader> loader;
  int64_t steps_per_epoch = 0;
  dist::ForwardBackward take_gradients;
  TrainerState state;
  int64_t saved_plan = 0, planned_steps = 0, eval_every = 0, eval_batch = 0, epochs = 0;
  std::unique_ptr<optim::LRSchedule> schedule;
  std::optional<MetricsLog> metrics;
  nlohmann::json saved_options;
  TrainResult result;
  // The last checkpoint: the one resumed from, then each one saved ("": none).
  std::string saved_in;
  int64_t saved_step = 0;
  double last_evaluation_s = -1;
  double window_loss = 0;
  int64_t window_items = 0, window_correct = 0, window_steps = 0;
  Clock::time_point window_start = Clock::now();
  // The group a background sharded save agrees on, which nothing else uses (train/checkpoint.h).
  std::unique_ptr<dist::ProcessGroup> saving_group;
  CheckpointSaver saver{given.async_save};  // last: destroyed first, waiting for a save in flight

  Run(const TrainOptions& options, std::ostream& rank0_log, bool rank0_interactive, dist::ProcessGroup& ranks,
      const CustomModel* custom_model)
      : given(options),
        o(options),
        group(ranks),
        rank(ranks.rank()),
        distributed(ranks.size() > 1),
        log(rank == 0 ? rank0_log : nowhere),
        interactive(rank == 0 && rank0_interactive),
        plan(ranks, parallel_options(options)),
        custom(custom_model) {
    if (custom) {
      WEFT_CHECK(custom->module, ValueError, "the model to train is missing");
      WEFT_CHECK(!o.checkpoint_activations, ValueError, "--checkpoint-activations: cuts weft's own models into "
                 "segments; ", custom->name, " is not one of them");
      WEFT_CHECK(!o.tensor_parallel() && !o.pipeline_parallel(), ValueError, "--parallel: tp and pp split weft's own "
                 "GPT; ", custom->name, " is not one of them (the data-parallel modes take any model)");
    }
    if (given.async_save && distributed) saving_group = group.split(0, rank);
    if (rank != 0) {
      o.out_dir.clear();
      o.profile_trace.clear();
    }
    check_precision(o.precision, log);
    batch_size = o.batch_size.value_or(task_defaults(o.model).batch_size);
    const int replicas = plan.replicas();
    WEFT_CHECK(batch_size % replicas == 0, ValueError, "--batch-size: is the global batch, split over the ", replicas,
               plan.ranks_name(), ", so it must be a multiple of ", replicas, ", got '", batch_size, "'");
    rank_batch = batch_size / replicas;
    WEFT_CHECK(rank_batch % o.grad_accum == 0, ValueError, "--grad-accum: must divide --batch-size (", batch_size,
               replicas > 1 ? str(": ", rank_batch, " on each of ", replicas, plan.ranks_name())
                            : std::string(", the task's default"),
               ") so that every micro-batch has batch-size / grad-accum samples, got '", o.grad_accum, "'");
    micro_batch = rank_batch / o.grad_accum;
    if (o.threads > 0) {
      set_num_threads(o.threads);
    } else if (const int shared = dist::threads_per_local_rank(); shared > 0) {
      set_num_threads(shared);
      log << "threads: " << shared << " per rank, the cores shared among the " << dist::world().local_size
          << " ranks on this host (--threads N to choose)\n";
    }
    if (o.memory_limit > 0) CachingAllocator::cpu().set_memory_limit(o.memory_limit);
    out.emplace(o, log);
    task = load_task(o, log);
    const TaskDefaults& d = task->defaults();
    const bool adaptive = o.optimizer == optim::OptimizerKind::adam || o.optimizer == optim::OptimizerKind::adamw;
    lr = o.lr.value_or(adaptive ? d.adam_lr : d.sgd_lr);
    clip_grad = o.clip_grad.value_or(d.clip_grad);
  }

  // The model split and distributed by the plan, its optimizer over what the plan says it updates,
  // and the loss scaler.
  void build_model() {
    manual_seed(o.seed);
    model = custom ? custom->module : task->make_model(o.checkpoint_activations);
    // Both checked before either says what it did: a refusal is the only line.
    const std::string initialised = o.init_from.empty() ? "" : init_from_checkpoint();
    const std::string frozen = o.freeze.empty() ? "" : freeze_parameters();
    log << initialised << frozen;
    whole_params = model->num_parameters();  // a tensor-parallel rank or a stage holds a share
    model = plan.split(model);
    // --master-weights: the optimizer takes the f32 initialisation as its masters, and the model
    // goes to bf16; each step writes the masters, rounded, back into it.
    std::vector<Tensor> masters;
    if (o.master_weights) {
      NoGradGuard no_grad;
      for (const Tensor& p : model->parameters()) masters.push_back(Tensor::empty(p.shape(), DType::f32).copy_(p));
      model->to(*low_precision);
    }
    // ZeRO lays the parameters out in flat buckets and gives the optimizer this rank's shards (under
    // master weights, the optimizer keeps f32 masters of the shards); rank 0's weights go to all.
    if (distributed) dist::ProcessGroup::set_timeout(o.comm_timeout);
    plan.distribute(*model);
    if (o.master_weights) masters = plan.mode().shard(masters, DType::f32);
    const std::vector<Tensor> computed = plan.optimizer_params(*model);
    optimizer = make_optimizer(o, task->defaults(), lr, o.master_weights ? masters : computed);
    if (o.master_weights) optimizer->keep_masters_of(computed);
    masters.clear();
    optimizer_io = plan.optimizer_io(optimizer_state_io(*model, *optimizer), *optimizer, o.resume_dir);
    if (o.precision == amp::Precision::fp16) scaler.emplace();
    // Clipping's norm is read while backward runs, each gradient as it becomes final (in cache),
    // except under fp16, whose scaler rewrites the gradients (unscale) after backward. Under data
    // parallelism the norm is of the averaged gradients, read after the all-reduce.
    if (clip_grad > 0 && !scaler && !distributed) backward_norm.emplace(trainable(model->parameters()));
    sampler = task->train_sampler(batch_size, o.seed, plan.replica(), plan.replicas());
    loader.emplace(task->train_data(), sampler, rank_batch, /*drop_last=*/false, o.prefetch);
    steps_per_epoch = loader->num_batches();
    if (o.limit_train_batches > 0) steps_per_epoch = std::min(steps_per_epoch, o.limit_train_batches);
  }

  // --init-from: the whole model's weights, before any split, from what weft eval reads; checked
  // tensor by tensor against the model first (a GPT was built in the checkpoint's shape).
  std::string init_from_checkpoint() {
    const infer::Weights w = infer::load_weights(o.init_from);
    WEFT_CHECK(w.model_name.empty() || w.model_name == model_name, ValueError, "--init-from ", o.init_from,
               " holds a ", w.model_name, " and this run trains a ", model_name, custom ? "" : " (--model)");
    infer::check_fit(*model, model_name, w.state, o.init_from);
    NoGradGuard no_grad;
    model->load_state_dict(w.state);
    return str("initialised from ", o.init_from, "\n");
  }

  // --freeze: the matching parameters take no gradient, so no optimizer moves them. Data
  // parallelism all-reduces every parameter's gradient, and is refused rather than left waiting.
  std::string freeze_parameters() {
    WEFT_CHECK(!distributed, ValueError, "--freeze trains in one process only: under mpirun every rank waits for "
               "the gradients of every parameter");
    const FrozenNames pattern(o.freeze);
    std::vector<std::string> frozen;
    for (auto& [name, p] : model->named_parameters())
      if (pattern.matches(name)) {
        p.requires_grad_(false);
        frozen.push_back(name);
      }
    const nn::NamedTensors all = model->named_parameters();
    WEFT_CHECK(!frozen.empty(), ValueError, "--freeze '", o.freeze, "' matches none of the model's parameters (",
               all.front().first, ", ...)");
    WEFT_CHECK(frozen.size() < all.size(), ValueError, "--freeze '", o.freeze, "' matches every one of the model's ",
               all.size(), " parameters: nothing would train");
    return str("frozen: ", frozen.size(), " tensors (", frozen.front(), frozen.size() > 1 ? ", ...)" : ")", "\n");
  }

  // --resume: weights, optimizer state, step, generator and loss scale, from a checkpoint of any
  // layout. Then the plan starts (DDP's broadcast and hooks) and the step's forward-backward is set.
  void resume_and_start() {
    if (!o.resume_dir.empty()) {
      plan.resume(*model, optimizer_io, o.resume_dir, [&](const nn::Module* fit) {
        SavedCheckpoint saved = read_checkpoint(o.resume_dir, model_name, optimizer_io.name, fit);
        state = std::move(saved.trainer);
        return std::move(saved.state);
      });
      default_generator().set_state(state.rng);
      if (scaler && state.grad_scaler) scaler->load_state(*state.grad_scaler);
      saved_plan = saved_planned_steps(state.options, steps_per_epoch, str(o.resume_dir, "/trainer.json: options"));
      log << "resumed from " << o.resume_dir << " at step " << state.step << "\n";
    }
    // Mixed precision: the optimizer writes each weight's 16-bit copy as it updates it, and the
    // forward's linear layers read those instead of casting every weight each step.
    // (Not of ZeRO's shards: the forward reads whole weights.)
    if (low_precision && !o.master_weights && !plan.mode().shards_state())
      optimizer->keep_low_precision_copies(*low_precision);
    plan.start(*model);
    take_gradients = plan.forward_backward(
        [this](nn::Module& m, const LossFn& loss, const data::Batch& batch, optim::BackwardGradNorm* norm,
               dist::GradientSync* sync) {
          return accumulate_step(m, loss, *optimizer, batch, micro_batch, o.auto_batch, low_precision,
                                 scaler ? &*scaler : nullptr, state.step, log, task->tallies_accuracy(), norm, sync);
        },
        *model, *optimizer, low_precision);
  }

  // --time-limit covers the final evaluation and the save after it: the seconds the last one took,
  // or before any, the held-out samples at half a training step's time each. A forward without
  // the backward's two products is about a third (a GPT's validation: 0.29 of a step per window on
  // a quiet machine); the rest is room for a busy one.
  double evaluation_estimate(double step_seconds) const {
    if (last_evaluation_s >= 0) return last_evaluation_s;
    return static_cast<double>(task->eval_samples()) * step_seconds / static_cast<double>(rank_batch) / 2;
  }

  // The steps the run takes (--steps, --epochs, the resumed run's plan, or what --time-limit has
  // time for), the schedule over them, and the run's first log line.
  void plan_steps(Clock::time_point start) {
    const TaskDefaults& d = task->defaults();
    WEFT_CHECK(!o.epochs || *o.epochs * static_cast<double>(steps_per_epoch) <= static_cast<double>(kMaxSteps),
               ValueError, "--epochs: must be at most ", shortest(static_cast<double>(kMaxSteps) / steps_per_epoch),
               " at ", steps_per_epoch, " steps per epoch (a run is at most ", kMaxSteps, " steps), got '",
               shortest(*o.epochs), "'");
    planned_steps = o.steps                               ? *o.steps
                    : o.epochs                            ? std::llround(std::ceil(*o.epochs * steps_per_epoch))
                    : saved_plan > 0 && o.time_limit == 0 ? saved_plan
                                                          : 0;
    if (planned_steps == 0 && o.time_limit > 0) plan_steps_in_time(start);
    if (planned_steps == 0) planned_steps = std::llround(std::ceil(d.epochs * steps_per_epoch));
    if (saved_plan > 0 && saved_plan != planned_steps && o.schedule == "cosine")
      log << "note: the run was planned for " << saved_plan << " steps and now runs " << planned_steps
          << "; the cosine schedule is re-planned over " << planned_steps << " steps from here\n";
    WEFT_CHECK(!o.profile_last_step || *o.profile_last_step <= planned_steps, ValueError,
               "--profile-steps: must end by the run's last step, ", planned_steps, ", got '",
               o.profile_first_step.value_or(0), ":", o.profile_last_step.value_or(0), "'");
    WEFT_CHECK(!o.warmup || *o.warmup <= planned_steps, ValueError, "--warmup: must be at most the ", planned_steps,
               " steps this run plans, got '", o.warmup.value_or(0), "'");
    const int64_t warmup = o.warmup.value_or(d.warmup.value_or(std::min<int64_t>(100, planned_steps / 10)));
    schedule = make_schedule(o.schedule, lr, warmup, planned_steps, steps_per_epoch);
    eval_every = o.eval_every.value_or(d.eval_every.value_or(steps_per_epoch));
    eval_batch = d.eval_batch > 0 ? d.eval_batch : batch_size;
    epochs = (planned_steps + steps_per_epoch - 1) / steps_per_epoch;

    if (!o.out_dir.empty()) metrics.emplace(o.out_dir, same_directory(o.resume_dir, o.out_dir) ? state.step : 0);
    saved_options = o.to_json();
    saved_options["planned_steps"] = planned_steps;
    saved_options["task"] = task->describe();
    saved_in = o.resume_dir;
    saved_step = state.step;

    result.model = model_name;
    result.params = whole_params;
    result.planned_steps = planned_steps;
    result.batch_size = batch_size;
    result.items_name = task->items();
    result.task = task->describe();
    result.setup = {{"optimizer", optim::optimizer_name(o.optimizer)}, {"lr", lr}, {"schedule", o.schedule},
                    {"precision", amp::precision_name(o.precision)}, {"grad_accum", o.grad_accum},
                    {"checkpoint_activations", o.checkpoint_activations}, {"clip_grad", clip_grad}, {"seed", o.seed},
                    {"threads", get_num_threads()}, {"out", o.out_dir},
                    {"parallel", !distributed ? "none" : o.parallel.empty() ? "ddp" : o.parallel},
                    {"ranks", group.size()}, {"tp", o.tp}, {"pp", o.pp}, {"pp_schedule", given.pp_schedule},
                    {"grad_compress", o.grad_compress.empty() ? "none" : o.grad_compress},
                    {"sync_every", o.sync_every}, {"all_reduced_bytes_per_step", plan.mode().all_reduced_bytes()}};
    log << model_name << ": " << result.params << " parameters; " << planned_steps << " steps of " << batch_size
        << " samples, " << steps_per_epoch << " per epoch" << plan.describe(rank_batch, micro_batch, o.print_schedule);
  }

  // A loss that is no longer a number means the parameters are lost, and every later step and
  // checkpoint would carry them: stop, saving nothing over the last checkpoint.
  [[noreturn]] void diverged(const char* what, double loss, int64_t step) const {
    throw DivergedError(str(
        "step ", step, ": ", what, " is ", loss, ", not a finite number: training diverged. ",
        saved_in.empty() ? std::string("No checkpoint was saved")
                         : str("The last checkpoint, of step ", saved_step, ", is kept in ", saved_in),
        "; nothing was saved after it. Try a lower --lr (this run: ", lr, "), --clip-grad 1",
        o.precision == amp::Precision::fp32 ? "" : ", or --precision fp32"));
  }

  // With --out, the checkpoint of the step just taken: rank 0 writes it; where the plan shards the
  // state every rank writes its shard (train/checkpoint.h).
  void save() {
    if (metrics) metrics->flush();
    state.epoch = state.step / steps_per_epoch;
    state.rng = default_generator().state();
    state.options = saved_options;
    if (scaler) state.grad_scaler = scaler->state();
    const auto save_files = [&](const std::string& dir) { task->save_files(dir); };
    saver.save(given.out_dir, saving_group ? *saving_group : group,
               plan.checkpoint_shard(*model, *optimizer, optimizer_io), *model, model_name, optimizer_io, state,
               task->checkpoint_metadata(), save_files);
    saved_in = given.out_dir;
    saved_step = state.step;
  }

  // Evaluates (halving the batch on out-of-memory under --auto-batch), logs, and with --out saves
  // the checkpoint.
  void evaluate() {
    const Clock::time_point evaluation_start = Clock::now();
    plan.mode().before_saving(state.step);
    // A model held in bf16 (--master-weights) takes a classifier's f32 images through autocast, as
    // weft eval does; autocast over f32 parameters evaluates in f32, as it always has.
    const AutocastGuard model_dtype(o.master_weights ? low_precision : std::nullopt);
    // A bar on a terminal: a GPT's validation can take as long as many steps.
    std::optional<monitor::ProgressBar> eval_bar;
    const EvalProgress progress = [&](int64_t done, int64_t batches) {
      if (!eval_bar) return;
      eval_bar->update(done, "");
      if (done == batches) eval_bar->erase();
    };
    Evaluation e;
    for (;;) {
      try {
        eval_bar.reset();
        if (interactive)
          eval_bar.emplace(log, "evaluating", (task->eval_samples() + eval_batch - 1) / eval_batch, 1, true, 1,
                           "batches");
        e = task->evaluate(plan.evaluation_model(*model), eval_batch, plan.evaluation_loss(), progress);
        break;
      } catch (const OutOfMemoryError& error) {
        if (!o.auto_batch || eval_batch == 1) throw;
        eval_batch = (eval_batch + 1) / 2;
        log << "auto-batch: evaluation ran out of memory (" << error.what() << "); evaluating in batches of "
            << eval_batch << "\n";
      }
    }
    if (!std::isfinite(e.loss)) diverged("the evaluation loss", e.loss, state.step);
    result.evaluation = e.result;
    result.evaluation_line = e.line;
    log << "step " << state.step << ": " << e.line;
    if (metrics) metrics->write(state.step, e.scalars);
    if (!given.out_dir.empty()) {
      save();
      log << "; checkpoint in " << o.out_dir;
    }
    log << "\n";
    last_evaluation_s = seconds_since(evaluation_start);
  }

  // Stopped by a signal: the checkpoint first, and no evaluation, which may take longer than the
  // notice.
  void save_on_stop() {
    log << result.stopped_by << ": stopped after step " << state.step << " of " << planned_steps;
    plan.mode().before_saving(state.step);
    if (!given.out_dir.empty()) {
      save();
      log << "; checkpoint in " << o.out_dir << " (continue with " << train_command("--resume " + shell_quote(o.out_dir))
          << ")";
    } else {
      log << "; nothing saved (no --out)";
    }
    log << "\n";
  }

  // What ends the run is decided once for every rank: a signal or the time limit one rank saw
  // first, a loss that stopped being a number on any; the loss and counts logged are the batch's.
  // The ranks of a tensor-parallel group, and the stages of a pipeline, count the same batch; a
  // pipeline's last stage alone has its loss.
  void agree(StepTally& tally, int64_t& items, bool& stop_now, bool& time_up) {
    if (!distributed) return;
    Tensor agreed = Tensor::from_vector<double>({tally.loss_sum, static_cast<double>(items),
                                                 static_cast<double>(tally.correct), stop_now ? 1.0 : 0.0,
                                                 time_up ? 1.0 : 0.0},
                                                {5});
    group.all_reduce(agreed, dist::ReduceOp::sum);
    const std::vector<double> a = agreed.to_vector<double>();
    const int64_t tp = o.tp, pp = o.pp;
    tally.loss_sum = a[0] / static_cast<double>(tp);
    items = static_cast<int64_t>(a[1]) / (tp * pp);
    tally.correct = static_cast<int64_t>(a[2]) / (tp * pp);
    stop_now = a[3] > 0;
    time_up = a[4] > 0;
  }

  // The step's update: the gradients unscaled (fp16), clipped to --clip-grad by the plan's norm.
  void update() {
    monitor::PhaseScope phase("optimizer");
    // Clipping's scaling rides in the optimizer's pass (bit for bit clip_grad_norm's): the grads
    // are read once for the norm and once for the update, never rewritten.
    double grad_factor = 1;
    if (clip_grad > 0) {
      if (scaler) scaler->unscale_(*optimizer);
      grad_factor = optim::clip_coefficient(plan.grad_norm(*model, backward_norm ? &*backward_norm : nullptr), clip_grad);
    }
    apply_update(*optimizer, scaler ? &*scaler : nullptr, state.step + 1, log, grad_factor);
    plan.mode().after_update();
  }

  // Every --log-every steps and the last: the window's loss, rate and memory to the metrics log.
  void log_window(bool last) {
    if (window_steps != o.log_every && !last) return;
    result.train_loss = window_loss / static_cast<double>(window_items);
    const MemoryStats memory = CachingAllocator::cpu().stats();
    nlohmann::json scalars = {{"train/loss", result.train_loss}, {"train/lr", optimizer->lr()},
                              {str("train/", task->items(), "_per_s"), window_items / seconds_since(window_start)},
                              {"memory/allocated_bytes", memory.allocated_bytes},
                              {"memory/reserved_bytes", memory.reserved_bytes}};
    if (task->tallies_accuracy()) scalars["train/accuracy"] = static_cast<double>(window_correct) / window_items;
    if (scaler) {
      scalars["amp/loss_scale"] = scaler->current_scale();
      scalars["amp/skipped_steps"] = scaler->skipped_steps();
    }
    if (metrics) metrics->write(state.step, scalars);
    window_loss = 0;
    window_items = window_correct = window_steps = 0;
    window_start = Clock::now();
  }

  // The result's closing figures.
  TrainResult finish(int64_t first_step, double train_seconds, Clock::time_point start) {
    result.steps = state.step;
    result.start_step = first_step;
    result.micro_batch = micro_batch;
    if (scaler) {
      result.skipped_steps = scaler->skipped_steps();
      result.loss_scale = scaler->current_scale();
    }
    result.items_per_s = train_seconds > 0 ? static_cast<double>(result.items) / train_seconds : 0;
    result.peak_allocated_bytes = CachingAllocator::cpu().stats().peak_allocated_bytes;
    result.peak_rss_bytes = monitor::peak_rss_bytes();
    result.wall_s = seconds_since(start);
    return std::move(result);
  }

  // Time a few forward and backward passes on the next batch (the first ones warm caches up), then
  // restore everything they touched: the gradients and the generator (dropout).
  void plan_steps_in_time(Clock::time_point start) {
    const auto rng = default_generator().state();
    std::vector<int64_t> order = sampler->indices(state.step / steps_per_epoch);
    order.resize(std::min<size_t>(order.size(), static_cast<size_t>(rank_batch)));
    const data::Batch batch = task->train_data()->get_batch(order);
    double seconds = 0;
    for (int i = 0; i < 5; ++i) {
      const Clock::time_point t = Clock::now();
      take_gradients(batch, nullptr);
      if (i >= 2) seconds += seconds_since(t);
    }
    optimizer->zero_grad();
    default_generator().set_state(rng);
    // The update adds to a step's time: plan on 10% more. The final evaluation comes out of the
    // same budget.
    const double per_step = 1.1 * seconds / 3;
    const double steps_in_time = std::max(
        1.0, std::min((o.time_limit - seconds_since(start) - evaluation_estimate(per_step)) / per_step,
                      static_cast<double>(kMaxSteps)));
    planned_steps = state.step + static_cast<int64_t>(steps_in_time);
    if (distributed) {  // every rank takes rank 0's plan
      Tensor steps = Tensor::scalar(static_cast<double>(planned_steps), DType::i64);
      group.broadcast(steps, 0);
      planned_steps = static_cast<int64_t>(steps.item());
    }
    if (o.time_limit - seconds_since(start) - evaluation_estimate(per_step) < per_step)
      log << "note: --time-limit " << o.time_limit << " s leaves no time to train beside the final evaluation "
          << "(about " << fixed(evaluation_estimate(per_step), 1) << " s): one step is taken, and the run takes longer\n";
    log << "time limit " << o.time_limit << " s: about " << per_step << " s per step and "
        << fixed(evaluation_estimate(per_step), 1) << " s for the final evaluation, planning " << planned_steps
        << " steps\n";
  }

};

}  // namespace

TrainResult train(const TrainOptions& options, std::ostream& rank0_log, bool rank0_interactive,
                  dist::ProcessGroup& group, const CustomModel* custom) {
  const Clock::time_point start = Clock::now();
  check_launch(options, group);
  Run run(options, rank0_log, rank0_interactive, group, custom);
  const TrainOptions& o = run.o;
  std::ostream& log = run.log;
  TrainerState& state = run.state;
  TrainResult& result = run.result;
  run.build_model();
  run.resume_and_start();
  run.plan_steps(start);

  std::optional<StepProfiler> profiler;
  if (!o.profile_trace.empty()) profiler.emplace(o, run.planned_steps, *run.model, run.model_name);
  CachingAllocator::cpu().reset_peak_stats();
  const int64_t bytes_before = run.plan.bytes_communicated();
  const int64_t first_step = state.step, planned_steps = run.planned_steps, steps_per_epoch = run.steps_per_epoch;
  const StopOnSignal stop;
  double train_seconds = 0, epoch_loss = 0;
  int64_t epoch_items = 0, epoch_correct = 0;
  run.window_start = Clock::now();
  std::optional<monitor::ProgressBar> bar;
  std::string shown;  // the epoch's running loss (and accuracy), on the bar from the first step
  run.model->train();
  while (state.step < planned_steps) {
    if (profiler) profiler->before(state.step);
    const Clock::time_point step_start = Clock::now();
    std::optional<monitor::PhaseScope> step_scope(std::in_place, "step");
    const int64_t epoch = state.step / steps_per_epoch, batch_in_epoch = state.step % steps_per_epoch;
    if (!bar) run.loader->start_epoch(epoch, batch_in_epoch);
    std::optional<data::Batch> batch = run.loader->next();
    WEFT_CHECK(batch.has_value(), Error, "the data loader ran out of batches at step ", state.step);
    int64_t items = batch->targets.numel();  // this rank's; the batch's after the ranks agree
    if (!bar) {
      bar.emplace(log, str("epoch ", epoch + 1, "/", run.epochs),
                  std::min(steps_per_epoch, planned_steps - epoch * steps_per_epoch), items * run.plan.replicas(),
                  run.interactive, o.log_every, run.task->items());
      epoch_loss = 0;
      epoch_items = epoch_correct = 0;
    }
    optim::set_scheduled_lr(*run.optimizer, *run.schedule, state.step);
    fail_rank_if_asked(group.rank(), state.step + 1);
    StepTally tally = run.take_gradients(*batch, run.backward_norm ? &*run.backward_norm : nullptr);
    const double average_step_s =
        (train_seconds + seconds_since(step_start)) / static_cast<double>(state.step + 1 - first_step);
    bool stop_now = !stop.received().empty(),
         time_up = o.time_limit > 0 && seconds_since(start) + run.evaluation_estimate(average_step_s) >= o.time_limit;
    run.agree(tally, items, stop_now, time_up);
    // fp16's loss scaler skips the steps whose loss or gradients overflow f16, and says when that
    // persists.
    if (!run.scaler && !std::isfinite(tally.loss_sum)) run.diverged("the training loss", tally.loss_sum, state.step + 1);
    run.update();
    step_scope.reset();
    const double step_seconds = seconds_since(step_start);
    if (profiler) profiler->after(state.step, step_seconds);
    ++state.step;
    monitor::report_progress(state.step);
    run.plan.mode().after_step(state.step);
    train_seconds += step_seconds;
    result.items += items;

    run.window_loss += tally.loss_sum;
    run.window_correct += tally.correct;
    run.window_items += items;
    ++run.window_steps;
    epoch_loss += tally.loss_sum;
    epoch_correct += tally.correct;
    epoch_items += items;
    shown = "loss " + fixed(epoch_loss / static_cast<double>(epoch_items), 4);
    if (run.task->tallies_accuracy()) shown += " acc " + fixed(100.0 * epoch_correct / epoch_items, 2) + "%";
    const bool last = state.step == planned_steps;
    run.log_window(last);
    bar->update(batch_in_epoch + 1, shown);
    if (batch_in_epoch + 1 == steps_per_epoch || last) {
      bar->finish(shown);
      bar.reset();
    }
    if (run.eval_every > 0 && state.step % run.eval_every == 0 && !last) run.evaluate();
    if (time_up && !last) {
      if (bar) bar->finish(shown);
      result.hit_time_limit = true;
      log << "time limit of " << o.time_limit << " s: stopped after step " << state.step << " of " << planned_steps
          << " at " << fixed(seconds_since(start), 1) << " s, leaving about "
          << fixed(run.evaluation_estimate(train_seconds / static_cast<double>(state.step - first_step)), 1)
          << " s for the final evaluation\n";
      break;
    }
    if (stop_now && !last) {
      // A rank that saw no signal itself stops with the one that did (mpirun hands SIGTERM on).
      result.stopped_by = stop.received().empty() ? "SIGTERM" : stop.received();
      if (bar) bar->finish(shown);
      break;
    }
  }
  result.steps_peak_allocated_bytes = CachingAllocator::cpu().stats().peak_allocated_bytes;
  if (state.step > first_step)
    result.setup["communicated_bytes_per_step"] = (run.plan.bytes_communicated() - bytes_before) / (state.step - first_step);
  run.plan.report(result.setup, log);
  if (result.stopped_by.empty() || state.step == planned_steps) {
    result.stopped_by.clear();
    run.evaluate();
    result.final_evaluation_s = run.last_evaluation_s;
  } else {
    run.save_on_stop();
  }
  run.saver.wait();
  if (profiler) result.profile = profiler->finish(o.profile_trace, run.low_precision, log);
  return run.finish(first_step, train_seconds, start);
}

}  // namespace weft::train
