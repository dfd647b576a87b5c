// Whether autocast is on, and with which 16-bit type (per thread, like grad mode). This is only
// the state: the policy that decides which op casts what lives with the ops (ops/autocast.h).
// It sits here, beside grad mode, because activation checkpointing must re-enter the forward's
// autocast state when it recomputes a block during backward.
#pragma once
#include <optional>

#include "weft/core/dtype.h"

namespace weft {

// The low-precision type of the current autocast scope, or nullopt when autocast is off.
std::optional<DType> autocast_dtype();

// Turns autocast on with bf16 or f16 for its scope (nullopt or f32: off); other types are a
// ValueError. Restores the previous state when it ends.
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

}  // namespace weft
