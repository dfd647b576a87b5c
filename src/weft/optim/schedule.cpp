#include "weft/optim/schedule.h"

#include <cmath>
#include <numbers>

namespace weft::optim {

namespace {

void check_lr(const char* schedule, const char* what, double lr) {
  WEFT_CHECK(lr >= 0, ValueError, schedule, ": ", what, " must be >= 0, got ", lr);
}

void check_step(const char* schedule, int64_t step) {
  WEFT_CHECK(step >= 0, ValueError, schedule, ": step must be >= 0, got ", step);
}

}  // namespace

ConstantLR::ConstantLR(double lr) : lr_(lr) { check_lr("ConstantLR", "lr", lr); }

double ConstantLR::lr_at(int64_t step) const {
  check_step("ConstantLR", step);
  return lr_;
}

StepLR::StepLR(double base_lr, int64_t step_size, double gamma)
    : base_lr_(base_lr), step_size_(step_size), gamma_(gamma) {
  check_lr("StepLR", "base_lr", base_lr);
  WEFT_CHECK(step_size > 0, ValueError, "StepLR: step_size must be > 0, got ", step_size);
  WEFT_CHECK(gamma > 0, ValueError, "StepLR: gamma must be > 0, got ", gamma);
}

double StepLR::lr_at(int64_t step) const {
  check_step("StepLR", step);
  return base_lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

CosineWarmupLR::CosineWarmupLR(double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : base_lr_(base_lr), warmup_(warmup_steps), total_(total_steps), min_lr_(min_lr) {
  check_lr("CosineWarmupLR", "base_lr", base_lr);
  check_lr("CosineWarmupLR", "min_lr", min_lr);
  WEFT_CHECK(min_lr <= base_lr, ValueError, "CosineWarmupLR: min_lr (", min_lr, ") must not exceed base_lr (",
             base_lr, ")");
  WEFT_CHECK(total_steps > 0, ValueError, "CosineWarmupLR: total_steps must be > 0, got ", total_steps);
  WEFT_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps, ValueError,
             "CosineWarmupLR: warmup_steps must be in [0, total_steps = ", total_steps, "], got ", warmup_steps);
}

double CosineWarmupLR::lr_at(int64_t step) const {
  check_step("CosineWarmupLR", step);
  if (step < warmup_) return base_lr_ * static_cast<double>(step) / static_cast<double>(warmup_);
  if (step >= total_) return min_lr_;
  double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_lr_ + 0.5 * (base_lr_ - min_lr_) * (1 + std::cos(std::numbers::pi * progress));
}

void set_scheduled_lr(Optimizer& optimizer, const LRSchedule& schedule, int64_t step) {
  optimizer.set_lr(schedule.lr_at(step));
}

}  // namespace weft::optim
