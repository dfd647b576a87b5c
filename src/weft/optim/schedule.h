// Learning-rate schedules: pure functions of the step number, so a resumed run gets the same
// learning rate from the step count alone (no scheduler state to checkpoint).
//
// Call set_scheduled_lr(optimizer, schedule, step) before optimizer.step() for update `step`
// (0 for the first). Constructors reject bad arguments, and lr_at a negative step, with
// ValueError.
#pragma once
#include <cstdint>

#include "weft/optim/optimizer.h"

namespace weft::optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double lr_at(int64_t step) const = 0;
};

// lr at every step.
class ConstantLR : public LRSchedule {
 public:
  explicit ConstantLR(double lr);
  double lr_at(int64_t step) const override;

 private:
  double lr_;
};

// base_lr * gamma^floor(step / step_size), as torch.optim.lr_scheduler.StepLR.
class StepLR : public LRSchedule {
 public:
  StepLR(double base_lr, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override;

 private:
  double base_lr_;
  int64_t step_size_;
  double gamma_;
};

// Linear warmup from 0, then cosine decay to min_lr at total_steps, min_lr after:
//   t < warmup:          base_lr * t / warmup
//   warmup <= t < total: min_lr + (base_lr - min_lr) * (1 + cos(pi * (t - warmup) / (total - warmup))) / 2
//   t >= total:          min_lr
class CosineWarmupLR : public LRSchedule {
 public:
  CosineWarmupLR(double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0);
  double lr_at(int64_t step) const override;

 private:
  double base_lr_;
  int64_t warmup_;
  int64_t total_;
  double min_lr_;
};

// optimizer.set_lr(schedule.lr_at(step)).
void set_scheduled_lr(Optimizer& optimizer, const LRSchedule& schedule, int64_t step);

}  // namespace weft::optim
