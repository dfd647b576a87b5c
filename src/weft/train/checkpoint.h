// A training checkpoint: everything `weft train --resume DIR` needs to continue a run exactly
// where it stopped.
//
//   DIR/model.safetensors      the weights (state-dict keys), readable by any safetensors reader
//   DIR/optimizer.safetensors  the optimizer's per-parameter state ("0.exp_avg", "0.step", ...)
//   DIR/trainer.json           epoch, step, RNG state, the run's options, fp16's loss-scaler state
//
// Each file is written atomically (temporary file, fsync, rename), so a crash leaves every file
// either old or new, never half-written. The three files record the step they were saved at
// (safetensors metadata "weft.step" and trainer.json's "step"), and loading refuses a set whose
// steps disagree (a crash between two renames) instead of resuming from mixed state.
#pragma once
#include <array>
#include <optional>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/amp/grad_scaler.h"
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

// `model_metadata` joins model.safetensors' metadata (what a reader needs to rebuild the model).
void save_checkpoint(const std::string& dir, const nn::Module& model, const std::string& model_name,
                     const optim::Optimizer& optimizer, const TrainerState& state,
                     const std::map<std::string, std::string>& model_metadata = {});
// Loads weights and optimizer state in place and returns the trainer state. `model_name` must
// match the one saved (ValueError otherwise); a missing or malformed file → IOError / FormatError.
TrainerState load_checkpoint(const std::string& dir, nn::Module& model, const std::string& model_name,
                             optim::Optimizer& optimizer);

}  // namespace weft::train
