#include "weft/train/checkpoint.h"

#include <filesystem>
#include <map>

#include "weft/io/atomic_file.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/safetensors.h"

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

// The model's name for each of the optimizer's parameters, in the optimizer's order.
std::vector<std::string> parameter_names(const nn::Module& model, const optim::Optimizer& optimizer) {
  std::map<const TensorImpl*, std::string> name_of;
  for (const auto& [name, tensor] : model.named_parameters()) name_of.emplace(tensor.impl(), name);
  std::vector<std::string> names;
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    auto it = name_of.find(optimizer.params()[i].impl());
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
  return std::stoll(it->second);
}

}  // namespace

void save_checkpoint(const std::string& dir, const nn::Module& model, const std::string& model_name,
                     const optim::Optimizer& optimizer, const TrainerState& state,
                     const std::map<std::string, std::string>& model_metadata,
                     const std::function<void(const std::string&)>& save_files) {
  io::CheckpointWriter checkpoint(dir, state.step);
  const std::string& staging = checkpoint.staging();
  std::string step = std::to_string(state.step);

  nn::StateDict state_dict = model.state_dict();
  std::vector<std::pair<std::string, Tensor>> weights(state_dict.begin(), state_dict.end());
  std::map<std::string, std::string> metadata = model_metadata;
  metadata.insert({{"format", "pt"}, {"weft.model", model_name}, {"weft.step", step}});
  io::save_safetensors(model_path(staging), weights, metadata);

  auto optimizer_state = optimizer.state_dict(parameter_names(model, optimizer));
  io::save_safetensors(optimizer_path(staging), {optimizer_state.begin(), optimizer_state.end()},
                       {{"weft.optimizer", optimizer.name()}, {"weft.step", step}, {kOptimizerKeys, kKeyedByName}});

  nlohmann::json trainer = {{"epoch", state.epoch}, {"step", state.step}, {"model", model_name},
                            {"optimizer", optimizer.name()}, {"options", state.options}};
  for (uint64_t word : state.rng) trainer["rng"].push_back(std::to_string(word));  // JSON numbers lose u64 bits
  if (state.grad_scaler)
    trainer["grad_scaler"] = {{"scale", state.grad_scaler->scale}, {"growth_tracker", state.grad_scaler->growth_tracker},
                              {"skipped_steps", state.grad_scaler->skipped_steps},
                              {"overflows_at_minimum", state.grad_scaler->overflows_at_minimum}};
  std::string text = trainer.dump(2) + "\n";
  io::write_file_atomic(trainer_path(staging), [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
  if (save_files) save_files(staging);
  checkpoint.commit();
}

TrainerState load_checkpoint(const std::string& dir, nn::Module& model, const std::string& model_name,
                             optim::Optimizer& optimizer) {
  const std::string files = io::current_checkpoint(dir);
  std::string path = trainer_path(files);
  nlohmann::json trainer;
  try {
    trainer = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(str(path, ": not valid JSON (", e.what(), ")"));
  }
  TrainerState state;
  try {
    state.epoch = trainer.at("epoch").get<int64_t>();
    state.step = trainer.at("step").get<int64_t>();
    state.options = trainer.value("options", nlohmann::json::object());
    const auto& rng = trainer.at("rng");
    if (rng.size() != state.rng.size()) throw FormatError(str(path, ": rng must have 4 words"));
    for (size_t i = 0; i < state.rng.size(); ++i) state.rng[i] = std::stoull(rng.at(i).get<std::string>());
    if (trainer.contains("grad_scaler")) {
      const auto& g = trainer["grad_scaler"];
      state.grad_scaler = amp::GradScalerState{.scale = g.at("scale").get<double>(),
                                               .growth_tracker = g.at("growth_tracker").get<int64_t>(),
                                               .skipped_steps = g.at("skipped_steps").get<int64_t>(),
                                               .overflows_at_minimum = g.at("overflows_at_minimum").get<int64_t>()};
    }
    std::string saved_model = trainer.at("model").get<std::string>();
    if (saved_model != model_name)
      throw ValueError(str("checkpoint ", dir, " holds a ", saved_model, " model, not ", model_name));
    std::string saved_optimizer = trainer.at("optimizer").get<std::string>();
    if (saved_optimizer != optimizer.name())
      throw ValueError(str("checkpoint ", dir, " was trained with ", saved_optimizer, ", not ", optimizer.name(),
                           "; pass the same --optimizer to resume"));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(str(path, ": ", e.what()));
  } catch (const std::logic_error& e) {  // stoll / stoull
    throw FormatError(str(path, ": bad number (", e.what(), ")"));
  }

  io::SafetensorsFile weights = io::load_safetensors(model_path(files));
  io::SafetensorsFile optimizer_file = io::load_safetensors(optimizer_path(files));
  if (saved_step(weights, model_path(files)) != state.step ||
      saved_step(optimizer_file, optimizer_path(files)) != state.step)
    throw FormatError(str("checkpoint ", dir, " is inconsistent: its files were saved at different steps "
                          "(a crash while saving?); resume from an earlier checkpoint"));
  nn::StateDict state_dict;
  for (const auto& [name, tensor] : weights.tensors) state_dict.insert(name, tensor);
  std::map<std::string, Tensor> optimizer_state(optimizer_file.tensors.begin(), optimizer_file.tensors.end());
  model.load_state_dict(state_dict);
  auto keys = optimizer_file.metadata.find(kOptimizerKeys);
  if (keys == optimizer_file.metadata.end()) {
    optimizer.load_state_dict(optimizer_state);  // positional: the parameter order has not changed since
  } else {
    WEFT_CHECK(keys->second == kKeyedByName, FormatError, optimizer_path(files), ": ", kOptimizerKeys, " is '",
               keys->second, "', expected '", kKeyedByName, "'; was it written by a newer weft?");
    optimizer.load_state_dict(optimizer_state, parameter_names(model, optimizer));
  }
  return state;
}

}  // namespace weft::train
