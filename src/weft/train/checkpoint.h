// A training checkpoint: everything `weft train --resume DIR` needs to continue a run exactly
// where it stopped. Each save is one atomic unit in the checkpoint directory DIR
// (io/checkpoint_dir.h): its files go into a step directory that becomes current all at once,
// when the symlink DIR/latest is replaced, so a save killed or out of disk at any point leaves
// the previous checkpoint current and resumable, and the next save removes what it left.
//
//   DIR/latest                  -> step-00000040, the current checkpoint
//   DIR/step-00000040/
//     model.safetensors         the weights (state-dict keys), readable by any safetensors reader
//     optimizer.safetensors     the optimizer's per-parameter state, keyed by the model's parameter
//                               names ("wte.weight.exp_avg", "wte.weight.step", ...; a tied
//                               parameter once, under its first name)
//     trainer.json              epoch, step, RNG state, the run's options, fp16's loss-scaler state
//     ...                       the task's own files (a GPT's tokenizer: tokenizer.model, or vocab.json and merges.txt)
//   DIR/model.safetensors, ...  -> latest/model.safetensors, ...: the current checkpoint's files
//
// Loading reads the step directory DIR/latest points to, or the files directly in DIR of a
// checkpoint written before step directories. The files record the step they were saved at (safetensors
// metadata "weft.step" and trainer.json's "step"), and loading still refuses a set whose steps
// disagree (such an older checkpoint torn by a crash between two renames, or files edited by hand).
//
// Optimizer state keyed by name (metadata "weft.optimizer_keys": "parameter names") lets a
// sharded checkpoint map it to whichever rank holds the parameter. Checkpoints written before
// were keyed by position ("0.exp_avg"), and still load: position i is the optimizer's parameter
// i, which is the model's i-th parameter when the optimizer was built over model.parameters(),
// as every weft trainer builds it. A name in the file that the model lacks → ValueError naming it.
//
// A sharded checkpoint (ZeRO: no rank ever holds the parameters or their state whole):
//
//   DIR/step-00000040/
//     shard-00001-of-00004.safetensors   rank 1's runs of the flattened parameters ("NAME", 1-D),
//                                        the same runs of their optimizer state ("NAME.exp_avg",
//                                        "NAME.master", ...) and "NAME.step"; rank 0's also holds
//                                        the model's buffers whole
//     shards.json                        the index: every tensor's shape, dtype and runs (rank,
//                                        first element, length), the model's metadata, the
//                                        checkpoint's id, which every shard file repeats, and
//                                        each shard's checksum
//     trainer.json, the task's files     as above
//
// Every rank writes its file into the same staging directory and rank 0 commits them as one
// checkpoint, once all have written. Loading assembles one process's weights and optimizer state
// from the shards, so a sharded checkpoint resumes on any number of ranks, with or without ZeRO,
// and consolidate_checkpoint merges it into one model file that weft eval reads.
//
// CheckpointSaver saves a checkpoint, one-process or sharded, in the background (weft train
// --async-save), as PyTorch DCP's async_save does: the same files and the same commit, written
// while training goes on.
#pragma once
#include <array>
#include <optional>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/amp/grad_scaler.h"
#include "weft/dist/parallel_plan.h"
#include "weft/dist/process_group.h"
#include "weft/dist/split_model.h"
#include "weft/nn/module.h"
#include "weft/optim/optimizer.h"

namespace weft::train {

struct TrainerState {
  int64_t epoch = 0;  // epochs finished
  int64_t step = 0;   // optimizer steps taken
  std::array<uint64_t, 4> rng{};  // weft::default_generator()'s state
  nlohmann::json options;         // the run's options, as the trainer recorded them
  std::optional<amp::GradScalerState> grad_scaler;  // fp16 runs
};

// How optimizer state goes into and comes out of a checkpoint (dist/split_model.h). The overloads
// that take an Optimizer read and write it directly.
using dist::OptimizerStateIO;
using dist::CheckpointShard;  // what one rank contributes to a sharded checkpoint
OptimizerStateIO optimizer_state_io(const nn::Module& model, optim::Optimizer& optimizer);

// `model_metadata` joins model.safetensors' metadata (what a reader needs to rebuild the model);
// `save_files`, when given, writes the task's own files into the directory it is passed, which
// becomes part of the same checkpoint. IOError when the save fails; the previous checkpoint stays.
void save_checkpoint(const std::string& dir, const nn::Module& model, const std::string& model_name,
                     const OptimizerStateIO& optimizer, const TrainerState& state,
                     const std::map<std::string, std::string>& model_metadata = {},
                     const std::function<void(const std::string& dir)>& save_files = {});
void save_checkpoint(const std::string& dir, const nn::Module& model, const std::string& model_name,
                     optim::Optimizer& optimizer, const TrainerState& state,
                     const std::map<std::string, std::string>& model_metadata = {},
                     const std::function<void(const std::string& dir)>& save_files = {});

// save_checkpoint and save_sharded_checkpoint, blocking, or with `background` in two halves. On the
// caller's thread, a save waits for the one in flight, creates the staging directory (rank 0 of a
// sharded save), copies the state it writes into new tensors (the next steps change the model and
// the optimizer in place) and writes the task's files (so that nothing the caller owns is read
// later); a thread of its own then writes the files and commits, as the blocking save does. One
// save at most is in flight, and the copies hold as many bytes as the state written (a rank's
// shard, for a sharded save) until it ends. A killed background save is a killed save: the
// previous checkpoint stays current, and the next save removes what it left. Its failure (IOError,
// as the blocking save's) is thrown by the next save or wait(); a sharded one on every rank, as
// the ranks agree on it in the thread.
//
// A background sharded save agrees through collectives on the `group` it is given, in the thread:
// that group must be one no other thread uses (a split of the training group: a group completes
// operations in the order each rank issues them, so the step's own would interleave with the
// save's differently on each rank).
class CheckpointSaver {
 public:
  explicit CheckpointSaver(bool background) : background_(background) {}
  // Waits for the save in flight; its failure is dropped, as the destructor runs without wait()
  // only while another exception ends the run.
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  void save(const std::string& dir, const nn::Module& model, const std::string& model_name,
            const OptimizerStateIO& optimizer, const TrainerState& state,
            const std::map<std::string, std::string>& model_metadata = {},
            const std::function<void(const std::string& dir)>& save_files = {});
  // A training run's checkpoint in one call, whatever its layout: with `shard` (the parallel
  // plan's, when it shards the state) this rank's part of a sharded checkpoint, collective over
  // `group`; without, `group`'s rank 0 saves one process's checkpoint and the others nothing.
  void save(const std::string& dir, dist::ProcessGroup& group, const std::optional<CheckpointShard>& shard,
            const nn::Module& model, const std::string& model_name, const OptimizerStateIO& optimizer,
            const TrainerState& state, const std::map<std::string, std::string>& model_metadata = {},
            const std::function<void(const std::string& dir)>& save_files = {}) {
    if (shard)
      save_sharded(dir, group, model_name, optimizer.name, *shard, state, model_metadata, save_files);
    else if (group.rank() == 0)
      save(dir, model, model_name, optimizer, state, model_metadata, save_files);
  }
  // Collective over `group` (see above): this rank's part of a sharded checkpoint.
  void save_sharded(const std::string& dir, dist::ProcessGroup& group, const std::string& model_name,
                    const std::string& optimizer_name, const CheckpointShard& shard, const TrainerState& state,
                    const std::map<std::string, std::string>& model_metadata = {},
                    const std::function<void(const std::string& dir)>& save_files = {});
  // Returns once no save is in flight; rethrows a background save's failure.
  void wait();

 private:
  bool background_;
  std::thread writer_;
  std::exception_ptr failure_;
};

// Loads weights and optimizer state in place and returns the trainer state. `model_name` must
// match the one saved (ValueError otherwise); a missing or malformed file, or weights that are not
// the model's (infer::check_fit) → IOError / FormatError naming the file.
// Both save and load need every optimizer parameter to be one of the model's (ValueError).
TrainerState load_checkpoint(const std::string& dir, nn::Module& model, const std::string& model_name,
                             const OptimizerStateIO& optimizer);

// What load_checkpoint reads, before anything is loaded: the trainer state, and the model's and
// the optimizer's state whole (from one process's files or put together from shards), for a
// split model to take its parts of (dist::ParallelPlan::resume). Refused as load_checkpoint
// refuses; with `fit`, also weights that are not that model's.
struct SavedCheckpoint {
  TrainerState trainer;
  dist::WholeState state;
};
SavedCheckpoint read_checkpoint(const std::string& dir, const std::string& model_name,
                                const std::string& optimizer_name, const nn::Module* fit);

// The options DIR's run recorded (TrainOptions::to_json()'s form, with "model" always there, for
// checkpoints saved before options were), for a resume to continue that run;
// IOError / FormatError naming the file when DIR holds no readable training checkpoint.
nlohmann::json saved_run_options(const std::string& dir);
// Whether DIR holds files of a weft train run (a checkpoint, metrics.jsonl, TensorBoard events),
// and with `remove`, deletes those and nothing else. Returns what it found (or removed).
std::vector<std::string> run_files(const std::string& dir, bool remove = false);

// Collective over `group`: each rank writes its file, rank 0 the index, trainer.json and the task's
// files (`save_files`), and rank 0 commits once every rank has written. A failure on any rank fails
// the save on every rank (IOError), and the previous checkpoint stays current.
void save_sharded_checkpoint(const std::string& dir, dist::ProcessGroup& group, const std::string& model_name,
                             const std::string& optimizer_name, const CheckpointShard& shard, const TrainerState& state,
                             const std::map<std::string, std::string>& model_metadata = {},
                             const std::function<void(const std::string& dir)>& save_files = {});
// DIR's current checkpoint, sharded, merged into one model file (weights and metadata, as a
// one-process checkpoint's model.safetensors). What merge_shards refuses (io/sharded_checkpoint.h),
// and tensors that are not those of the model the metadata describes (weft.model mlp | cnn | gpt,
// infer::check_fit) → FormatError / IOError naming the file; nothing is written then.
void consolidate_checkpoint(const std::string& dir, const std::string& out_file);
TrainerState load_checkpoint(const std::string& dir, nn::Module& model, const std::string& model_name,
                             optim::Optimizer& optimizer);

}  // namespace weft::train
