// Precision: the names of weft's training precisions, one vocabulary for what `weft train`
// runs and what `weft plan` prices.
//
//   fp32       everything in f32
//   bf16       mixed precision: the forward and backward run under autocast to bf16, while the
//              parameters (the optimizer's f32 master weights), their gradients and the optimizer
//              state stay f32
//   fp16       mixed precision as bf16, in f16, with dynamic loss scaling (amp::GradScaler)
//   bf16-pure  parameters, gradients and optimizer state in bf16, no f32 master copy; the planner
//              prices it, the trainer does not run it
//
// Invariant: parse_precision(precision_name(p)) == p for every Precision.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "weft/core/dtype.h"

namespace weft::amp {

enum class Precision { fp32, fp16, bf16, bf16_pure };

// What `weft train` runs, and every precision (what `weft plan` prices).
inline constexpr Precision kTrainedPrecisions[] = {Precision::fp32, Precision::bf16, Precision::fp16};
inline constexpr Precision kAllPrecisions[] = {Precision::fp32, Precision::fp16, Precision::bf16, Precision::bf16_pure};

// One of `accepted` by name (f32 and f16 stand for fp32 and fp16 too); ValueError listing them otherwise.
Precision parse_precision(std::string_view name, std::span<const Precision> accepted = kAllPrecisions);
// `accepted`'s names, joined by `separator`: "fp32, bf16, fp16".
std::string precision_names(std::span<const Precision> accepted, std::string_view separator);
const char* precision_name(Precision precision);
// The dtype the forward runs in under autocast: bf16 (bf16, bf16-pure), f16 (fp16), none (fp32).
std::optional<DType> compute_dtype(Precision precision);

}  // namespace weft::amp
