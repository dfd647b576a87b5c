#include "weft/train/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "weft/autograd/grad_mode.h"
#include "weft/infer/load.h"
#include "weft/infer/metadata.h"
#include "weft/io/atomic_file.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"
#include "weft/io/safetensors.h"
#include "weft/io/sharded_checkpoint.h"
#include "weft/nn/models.h"

namespace weft::train {

namespace {

namespace fs = std::filesystem;

std::string model_path(const std::string& dir) { return (fs::path(dir) / "model.safetensors").string(); }
std::string optimizer_path(const std::string& dir) { return (fs::path(dir) / "optimizer.safetensors").string(); }
std::string trainer_path(const std::string& dir) { return (fs::path(dir) / "trainer.json").string(); }

// Files written since optimizer state is keyed by parameter name say so in their metadata; older
// ones are keyed by position in the optimizer's parameter list.
constexpr const char* kOptimizerKeys = "weft.optimizer_keys";
constexpr const char* kKeyedByName = "parameter names";

// The model's name for each of the optimizer's parameters, in the optimizer's order (under master
// weights, the name of the model parameter each master is kept for).
std::vector<std::string> parameter_names(const nn::Module& model, const optim::Optimizer& optimizer) {
  std::map<const TensorImpl*, std::string> name_of;
  for (const auto& [name, tensor] : model.named_parameters()) name_of.emplace(tensor.impl(), name);
  const std::vector<Tensor>& kept = optimizer.has_masters() ? optimizer.low_precision_copies() : optimizer.params();
  std::vector<std::string> names;
  for (size_t i = 0; i < kept.size(); ++i) {
    auto it = name_of.find(kept[i].impl());
    WEFT_CHECK(it != name_of.end(), ValueError, optimizer.name(), "'s parameter ", i, " (shape ",
               shape_str(optimizer.params()[i].shape()), ") is not one of the model's parameters, so its state "
               "has no name to be saved under; build the optimizer over model.parameters()");
    names.push_back(it->second);
  }
  return names;
}

int64_t saved_step(const io::SafetensorsFile& file, const std::string& path) {
  auto it = file.metadata.find("weft.step");
  if (it == file.metadata.end()) throw FormatError(str(path, ": no weft.step in its metadata; not a weft training checkpoint"));
  return static_cast<int64_t>(io::decimal_integer(it->second, path + ": weft.step", INT64_MAX));
}

// trainer.json holds a few hundred bytes of state and the run's options.
constexpr uint64_t kMaxTrainerStateBytes = 16 << 20;

// trainer.json field by field, each of its type and range: a hand-edited or corrupt file is refused
// naming the field, rather than resuming at a negative step or running a plan that never ends.
struct SavedTrainer {
  TrainerState state;
  std::string model, optimizer;
};
SavedTrainer read_trainer_state(const std::string& path) {
  const nlohmann::json trainer = io::parse_json(io::read_input(path, kMaxTrainerStateBytes), path);
  WEFT_CHECK(trainer.is_object(), FormatError, path, ": expected a JSON object, found ", io::json_excerpt(trainer));
  SavedTrainer saved{.state = {}, .model = io::json_string(trainer, "model", path),
                     .optimizer = io::json_string(trainer, "optimizer", path)};
  TrainerState& state = saved.state;
  state.step = io::json_integer(trainer, "step", path, 0);
  // A checkpoint is saved after the epoch it counts has begun, and every epoch is at least one step.
  state.epoch = io::json_integer(trainer, "epoch", path, 0, state.step);
  // Absent or null in checkpoints saved without options.
  state.options = trainer.contains("options") ? io::json_field(trainer, "options", path) : nlohmann::json::object();
  if (state.options.is_null()) state.options = nlohmann::json::object();
  WEFT_CHECK(state.options.is_object(), FormatError, path, ": \"options\" must be an object, found ",
             io::json_excerpt(state.options));
  // The run's total: the step a checkpoint is saved at never passes the steps its run planned.
  if (state.options.contains("planned_steps"))
    io::json_integer(state.options, "planned_steps", path + ": options", state.step);
  const nlohmann::json& rng = io::json_field(trainer, "rng", path);
  WEFT_CHECK(rng.is_array() && rng.size() == state.rng.size(), FormatError, path, ": \"rng\" must be ",
             state.rng.size(), " decimal strings, found ", io::json_excerpt(rng));
  for (size_t i = 0; i < state.rng.size(); ++i) {
    WEFT_CHECK(rng[i].is_string(), FormatError, path, ": \"rng\" must be ", state.rng.size(),
               " decimal strings, found ", io::json_excerpt(rng));
    state.rng[i] = io::decimal_integer(rng[i].get<std::string>(), path + ": rng");
  }
  if (trainer.contains("grad_scaler")) {
    const nlohmann::json& g = trainer["grad_scaler"];
    const std::string where = path + ": grad_scaler";
    state.grad_scaler = amp::GradScalerState{
        .scale = io::json_number(g, "scale", where, std::numeric_limits<double>::min()),
        .growth_tracker = io::json_integer(g, "growth_tracker", where, 0),
        .skipped_steps = io::json_integer(g, "skipped_steps", where, 0, state.step),
        .overflows_at_minimum = io::json_integer(g, "overflows_at_minimum", where, 0, state.step)};
  }
  return saved;
}

void write_trainer_state(const std::string& dir, const std::string& model_name, const std::string& optimizer_name,
                         const TrainerState& state) {
  nlohmann::json trainer = {{"epoch", state.epoch}, {"step", state.step}, {"model", model_name},
                            {"optimizer", optimizer_name}, {"options", state.options}};
  for (uint64_t word : state.rng) trainer["rng"].push_back(std::to_string(word));  // JSON numbers lose u64 bits
  if (state.grad_scaler)
    trainer["grad_scaler"] = {{"scale", state.grad_scaler->scale}, {"growth_tracker", state.grad_scaler->growth_tracker},
                              {"skipped_steps", state.grad_scaler->skipped_steps},
                              {"overflows_at_minimum", state.grad_scaler->overflows_at_minimum}};
  const std::string text = trainer.dump(2) + "\n";
  io::write_file_atomic(trainer_path(dir), [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
}

// The metadata of a model file: the task's, and what says which model and step it is.
std::map<std::string, std::string> model_file_metadata(const std::map<std::string, std::string>& model_metadata,
                                                       const std::string& model_name, int64_t step) {
  std::map<std::string, std::string> metadata = model_metadata;
  metadata.insert({{"format", "pt"}, {"weft.model", model_name}, {"weft.step", std::to_string(step)}});
  return metadata;
}

// What save_checkpoint writes after the staging directory is made and before the task's files.
void write_model_and_state(const std::string& staging, const std::vector<std::pair<std::string, Tensor>>& weights,
                           const std::map<std::string, Tensor>& optimizer_state, const std::string& model_name,
                           const std::string& optimizer_name, const TrainerState& state,
                           const std::map<std::string, std::string>& model_metadata) {
  io::save_safetensors(model_path(staging), weights, model_file_metadata(model_metadata, model_name, state.step));
  io::save_safetensors(optimizer_path(staging), {optimizer_state.begin(), optimizer_state.end()},
                       {{"weft.optimizer", optimizer_name}, {"weft.step", std::to_string(state.step)},
                        {kOptimizerKeys, kKeyedByName}});
  write_trainer_state(staging, model_name, optimizer_name, state);
}

}  // namespace

OptimizerStateIO optimizer_state_io(const nn::Module& model, optim::Optimizer& optimizer) {
  return {.name = optimizer.name(),
          .save = [&model, &optimizer] { return optimizer.state_dict(parameter_names(model, optimizer)); },
          .load = [&model, &optimizer](const std::map<std::string, Tensor>& dict, bool keyed_by_name) {
            if (keyed_by_name)
              optimizer.load_state_dict(dict, parameter_names(model, optimizer));
            else  // the parameter order has not changed since
              optimizer.load_state_dict(dict);
          }};
}

void save_checkpoint(const std::string& dir, const nn::Module& model, const std::string& model_name,
                     optim::Optimizer& optimizer, const TrainerState& state,
                     const std::map<std::string, std::string>& model_metadata,
                     const std::function<void(const std::string&)>& save_files) {
  save_checkpoint(dir, model, model_name, optimizer_state_io(model, optimizer), state, model_metadata, save_files);
}

TrainerState load_checkpoint(const std::string& dir, nn::Module& model, const std::string& model_name,
                             optim::Optimizer& optimizer) {
  return load_checkpoint(dir, model, model_name, optimizer_state_io(model, optimizer));
}

void save_checkpoint(const std::string& dir, const nn::Module& model, const std::string& model_name,
                     const OptimizerStateIO& optimizer, const TrainerState& state,
                     const std::map<std::string, std::string>& model_metadata,
                     const std::function<void(const std::string&)>& save_files) {
  io::CheckpointWriter checkpoint(dir, state.step);
  nn::StateDict state_dict = model.state_dict();
  write_model_and_state(checkpoint.staging(), {state_dict.begin(), state_dict.end()}, optimizer.save(), model_name,
                        optimizer.name, state, model_metadata);
  if (save_files) save_files(checkpoint.staging());
  checkpoint.commit();
}

CheckpointSaver::~CheckpointSaver() {
  if (writer_.joinable()) writer_.join();
}

void CheckpointSaver::wait() {
  if (writer_.joinable()) writer_.join();
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void CheckpointSaver::save(const std::string& dir, const nn::Module& model, const std::string& model_name,
                           const OptimizerStateIO& optimizer, const TrainerState& state,
                           const std::map<std::string, std::string>& model_metadata,
                           const std::function<void(const std::string&)>& save_files) {
  if (!background_) return save_checkpoint(dir, model, model_name, optimizer, state, model_metadata, save_files);
  wait();
  auto checkpoint = std::make_unique<io::CheckpointWriter>(dir, state.step);
  std::vector<std::pair<std::string, Tensor>> weights;
  std::map<std::string, Tensor> optimizer_state;
  {
    NoGradGuard no_grad;
    for (const auto& [name, tensor] : model.state_dict()) weights.emplace_back(name, tensor.clone());
    for (const auto& [name, tensor] : optimizer.save()) optimizer_state.emplace(name, tensor.clone());
  }
  if (save_files) save_files(checkpoint->staging());
  writer_ = std::thread([this, checkpoint = std::move(checkpoint), weights = std::move(weights),
                         optimizer_state = std::move(optimizer_state), model_name, optimizer_name = optimizer.name,
                         state, model_metadata] {
    try {
      write_model_and_state(checkpoint->staging(), weights, optimizer_state, model_name, optimizer_name, state,
                            model_metadata);
      checkpoint->commit();
    } catch (...) {
      failure_ = std::current_exception();
    }
  });
}

nlohmann::json saved_run_options(const std::string& dir) {
  std::error_code error;
  const bool directory = fs::is_directory(dir, error);
  WEFT_CHECK(!error, IOError, dir, ": ", error.message());
  WEFT_CHECK(directory, IOError, "--resume ", dir, ": no such directory (give the --out directory of an earlier "
             "weft train)");
  SavedTrainer saved = read_trainer_state(trainer_path(io::current_checkpoint(dir)));
  nlohmann::json options = std::move(saved.state.options);
  options["model"] = saved.model;
  return options;
}

std::vector<std::string> run_files(const std::string& dir, bool remove) {
  // What weft train writes into --out: the checkpoint directory's entries (io/checkpoint_dir.h),
  // the files of checkpoints older than step directories, the metrics and TensorBoard's events.
  static const std::set<std::string> names = {"latest", "model.safetensors", "optimizer.safetensors", "trainer.json",
                                              "tokenizer.model", "vocab.json", "merges.txt", "shards.json",
                                              "metrics.jsonl"};
  std::vector<std::string> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (names.contains(name) || name.starts_with("step-") || name.starts_with(".tmp-step-") ||
        name.starts_with("shard-") || name.starts_with("events.out.tfevents."))
      found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  if (remove)
    for (const std::string& name : found) {
      fs::remove_all(fs::path(dir) / name, error);
      WEFT_CHECK(!error, IOError, "--overwrite: cannot delete ", (fs::path(dir) / name).string(), ": ", error.message());
    }
  return found;
}

SavedCheckpoint read_checkpoint(const std::string& dir, const std::string& model_name,
                                const std::string& optimizer_name, const nn::Module* fit) {
  const std::string files = io::current_checkpoint(dir);
  SavedTrainer saved = read_trainer_state(trainer_path(files));
  WEFT_CHECK(saved.model == model_name, ValueError, "checkpoint ", dir, " holds a ", saved.model, " model, not ",
             model_name, "; resume it without --model, which then comes from the checkpoint");
  WEFT_CHECK(saved.optimizer == optimizer_name, ValueError, "checkpoint ", dir, " was trained with ",
             saved.optimizer, ", not ", optimizer_name, "; pass the same --optimizer to resume");
  SavedCheckpoint out{.trainer = std::move(saved.state), .state = {}};
  // Checked against `fit` as a file weft eval reads is: every tensor of the model, of its shape.
  auto check = [&](const std::string& file) {
    if (!fit) return;
    nn::StateDict weights;
    for (const auto& [name, tensor] : out.state.weights) weights.insert(name, tensor);
    infer::check_fit(*fit, model_name, weights, file);
  };

  if (io::is_sharded_checkpoint(files)) {
    io::MergedShards merged = io::merge_shards(files);
    if (merged.step != out.trainer.step)
      throw FormatError(str("checkpoint ", dir, " is inconsistent: its shards were saved at step ", merged.step,
                            " and trainer.json at ", out.trainer.step, "; resume from an earlier checkpoint"));
    out.state.weights.insert(merged.tensors.begin(), merged.tensors.end());
    out.state.optimizer = std::move(merged.companions);
    check((fs::path(files) / io::kShardIndex).string());
    return out;
  }
  io::SafetensorsFile weights = io::load_safetensors(model_path(files));
  io::SafetensorsFile optimizer_file = io::load_safetensors(optimizer_path(files));
  if (saved_step(weights, model_path(files)) != out.trainer.step ||
      saved_step(optimizer_file, optimizer_path(files)) != out.trainer.step)
    throw FormatError(str("checkpoint ", dir, " is inconsistent: its files were saved at different steps "
                          "(a crash while saving?); resume from an earlier checkpoint"));
  out.state.weights.insert(weights.tensors.begin(), weights.tensors.end());
  out.state.optimizer.insert(optimizer_file.tensors.begin(), optimizer_file.tensors.end());
  check(model_path(files));
  auto keys = optimizer_file.metadata.find(kOptimizerKeys);
  if (keys != optimizer_file.metadata.end())
    WEFT_CHECK(keys->second == kKeyedByName, FormatError, optimizer_path(files), ": ", kOptimizerKeys, " is '",
               keys->second, "', expected '", kKeyedByName, "'; was it written by a newer weft?");
  out.state.keyed_by_name = keys != optimizer_file.metadata.end();
  return out;
}

TrainerState load_checkpoint(const std::string& dir, nn::Module& model, const std::string& model_name,
                             const OptimizerStateIO& optimizer) {
  SavedCheckpoint saved = read_checkpoint(dir, model_name, optimizer.name, &model);
  nn::StateDict weights;
  for (const auto& [name, tensor] : saved.state.weights) weights.insert(name, tensor);
  model.load_state_dict(weights);
  optimizer.load(saved.state.optimizer, saved.state.keyed_by_name);
  return std::move(saved.trainer);
}

namespace {

// What rank 0 prepares before any rank writes its shard: the staging directory and the task's
// files. Its failure is kept for every rank to agree on, rather than thrown on rank 0 alone.
struct ShardedStaging {
  std::optional<io::CheckpointWriter> writer;
  std::string error;
};

std::unique_ptr<ShardedStaging> stage_sharded(const std::string& dir, int rank, int64_t step,
                                              const std::function<void(const std::string&)>& save_files) {
  auto staging = std::make_unique<ShardedStaging>();
  if (rank != 0) return staging;
  try {
    staging->writer.emplace(dir, step);
    if (save_files) save_files(staging->writer->staging());
  } catch (const Error& e) {
    staging->error = e.what();
  }
  return staging;
}

// The rest of a sharded save, collective over `group`: each rank writes its shard, rank 0 the index
// and trainer.json, and rank 0 commits once every rank has written.
void write_sharded(const std::string& dir, dist::ProcessGroup& group, ShardedStaging& prepared,
                   const std::string& model_name, const std::string& optimizer_name, const CheckpointShard& shard,
                   const TrainerState& state, const std::map<std::string, std::string>& model_metadata) {
  const int rank = group.rank(), ranks = group.size();
  std::string& error = prepared.error;  // this rank's failure
  auto agree = [&] {
    if (group.any(!error.empty()))
      throw IOError(error.empty() ? str("saving the checkpoint in ", dir, " failed on another rank; the previous "
                                        "checkpoint stays current")
                                  : error);
  };
  agree();
  // Tells this save's files from another's: a shard left by an earlier save cannot pass for one.
  Tensor id = Tensor::scalar(static_cast<double>(std::random_device{}()), DType::i64);
  group.broadcast(id, 0);
  const std::string checkpoint_id = std::to_string(static_cast<int64_t>(id.item()));
  const std::string staging = io::staging_directory(dir, state.step);
  std::string checksum;
  try {
    checksum = io::save_safetensors(io::shard_file(staging, rank, ranks), {shard.tensors.begin(), shard.tensors.end()},
                                    {{io::kShardCheckpointId, checkpoint_id}, {"weft.step", std::to_string(state.step)},
                                     {"weft.model", model_name}, {"weft.optimizer", optimizer_name}});
  } catch (const Error& e) {
    error = e.what();
  }
  agree();
  // Every rank's checksum, for the index: each is the same length ("xxh3-64:" and 16 hex digits).
  Tensor own = Tensor::empty({std::ssize(checksum)}, DType::u8), all = Tensor::empty({ranks * std::ssize(checksum)}, DType::u8);
  std::copy(checksum.begin(), checksum.end(), own.data<uint8_t>());
  group.all_gather(own, all);
  std::vector<std::string> checksums;
  for (int r = 0; r < ranks; ++r)
    checksums.emplace_back(all.data<uint8_t>() + r * checksum.size(), all.data<uint8_t>() + (r + 1) * checksum.size());
  if (rank == 0) {
    try {
      io::write_shard_index(staging, state.step, checkpoint_id, model_file_metadata(model_metadata, model_name, state.step),
                            checksums, shard.layout);
      write_trainer_state(staging, model_name, optimizer_name, state);
      prepared.writer->commit();
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree();
}

}  // namespace

void save_sharded_checkpoint(const std::string& dir, dist::ProcessGroup& group, const std::string& model_name,
                             const std::string& optimizer_name, const CheckpointShard& shard, const TrainerState& state,
                             const std::map<std::string, std::string>& model_metadata,
                             const std::function<void(const std::string&)>& save_files) {
  const std::unique_ptr<ShardedStaging> staging = stage_sharded(dir, group.rank(), state.step, save_files);
  write_sharded(dir, group, *staging, model_name, optimizer_name, shard, state, model_metadata);
}

void CheckpointSaver::save_sharded(const std::string& dir, dist::ProcessGroup& group, const std::string& model_name,
                                   const std::string& optimizer_name, const CheckpointShard& shard,
                                   const TrainerState& state, const std::map<std::string, std::string>& model_metadata,
                                   const std::function<void(const std::string&)>& save_files) {
  if (!background_)
    return save_sharded_checkpoint(dir, group, model_name, optimizer_name, shard, state, model_metadata, save_files);
  wait();
  std::unique_ptr<ShardedStaging> staging = stage_sharded(dir, group.rank(), state.step, save_files);
  CheckpointShard copy{.tensors = {}, .parts = shard.parts, .layout = shard.layout};
  {
    NoGradGuard no_grad;
    for (const auto& [name, tensor] : shard.tensors) copy.tensors.emplace(name, tensor.clone());
  }
  writer_ = std::thread([this, &group, dir, staging = std::move(staging), copy = std::move(copy), model_name,
                         optimizer_name, state, model_metadata] {
    try {
      write_sharded(dir, group, *staging, model_name, optimizer_name, copy, state, model_metadata);
    } catch (...) {
      failure_ = std::current_exception();
    }
  });
}

void consolidate_checkpoint(const std::string& dir, const std::string& out_file) {
  const std::string files = io::current_checkpoint(dir);
  WEFT_CHECK(io::is_sharded_checkpoint(files), ValueError, dir, " is not a sharded checkpoint (it has no ",
             io::kShardIndex, "): its model.safetensors is already one file");
  const io::MergedShards merged = io::merge_shards(files);
  // Checked against the model the index describes, as weft eval will load the merged file.
  const std::string index = (fs::path(files) / io::kShardIndex).string();
  auto kind = merged.metadata.find("weft.model");
  const std::string model_name = kind == merged.metadata.end() ? "" : kind->second;
  const std::optional<nn::ModelKind> model_kind = nn::find_model_kind(model_name);
  WEFT_CHECK(model_kind.has_value(), FormatError, index, ": weft.model is '", model_name,
             "'; expected mlp, cnn or gpt (a checkpoint weft wrote)");
  std::shared_ptr<nn::Module> model;
  if (model_kind == nn::ModelKind::gpt) model = std::make_shared<nn::GPT>(infer::read_saved_gpt(dir).config);
  else model = nn::make_image_classifier(*model_kind, infer::saved_classifier_shape(merged.metadata, index));
  nn::StateDict weights;
  for (const auto& [name, tensor] : merged.tensors) weights.insert(name, tensor);
  infer::check_fit(*model, model_name, weights, index);
  io::save_safetensors(out_file, merged.tensors, merged.metadata);
}

}  // namespace weft::train
