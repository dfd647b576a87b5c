// GradScaler: dynamic loss scaling for f16 training, as torch.cuda.amp.GradScaler.
//
// f16's smallest subnormal is 2^-24 (about 6e-8), so small gradients round to zero in an f16
// backward. The loss is multiplied by `scale` before backward, which scales every gradient with
// it; unscale_() divides the optimizer's (f32 master) gradients by it again and notes whether any
// is inf or NaN; step() skips the update when one is (the scale was too large: an overflow); and
// update() adjusts the scale: x backoff_factor after an overflow, x growth_factor after
// growth_interval clean steps in a row.
//
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);   // optional: before clipping, so the clip sees true gradients
//   scaler.step(optimizer);       // unscales first if unscale_ was not called
//   scaler.update();
//
// Invariants: gradients are unscaled at most once per step (a second unscale_ is a ValueError);
// the scale never falls below min_scale. An overflow at min_scale still skips the step, and
// such steps in a row are counted: a scale that cannot go lower cannot cure them, because the
// model's f16 values overflow by themselves. stuck_at_minimum() then says to use bf16, which has
// f32's range (the most common fp16 complaint in DeepSpeed's tracker).
#pragma once
#include <cstdint>

#include "weft/core/tensor.h"
#include "weft/optim/optimizer.h"

namespace weft::amp {

struct GradScalerOptions {
  double init_scale = 65536;  // 2^16
  double growth_factor = 2;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 1;
};

// What a checkpoint keeps to continue scaling exactly where it stopped.
struct GradScalerState {
  double scale = 65536;
  int64_t growth_tracker = 0;  // clean steps since the last change of scale
  int64_t skipped_steps = 0;   // all steps skipped so far
  int64_t overflows_at_minimum = 0;  // consecutive skipped steps at min_scale
};

class GradScaler {
 public:
  // Bad options (non-positive scale, growth <= 1, backoff outside (0, 1), interval < 1) → ValueError.
  explicit GradScaler(GradScalerOptions options = {});

  Tensor scale(const Tensor& loss) const;  // loss * scale, recorded for backward
  void unscale_(optim::Optimizer& optimizer);
  // Updates unless an unscaled gradient is inf or NaN; returns whether it did. `grad_factor`
  // goes to Optimizer::step (clipping's coefficient, say).
  bool step(optim::Optimizer& optimizer, double grad_factor = 1);
  // Adjusts the scale from this step's finding and readies the next step.
  void update();

  double current_scale() const { return state_.scale; }
  int64_t skipped_steps() const { return state_.skipped_steps; }
  // Three or more overflows in a row at min_scale: f16 cannot represent this model's values.
  bool stuck_at_minimum() const { return state_.overflows_at_minimum >= 3; }

  const GradScalerState& state() const { return state_; }
  void load_state(const GradScalerState& state);  // a non-positive scale → ValueError

 private:
  GradScalerOptions options_;
  GradScalerState state_;
  bool unscaled_ = false;   // unscale_ ran this step
  bool found_inf_ = false;  // and found an inf or NaN
};

}  // namespace weft::amp
