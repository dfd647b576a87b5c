#include "weft/amp/precision.h"

#include "weft/core/error.h"

namespace weft::amp {

Precision parse_precision(std::string_view name) {
  if (name == "fp32" || name == "f32") return Precision::fp32;
  if (name == "fp16" || name == "f16") return Precision::fp16;
  if (name == "bf16") return Precision::bf16;
  if (name == "bf16-pure") return Precision::bf16_pure;
  throw ValueError(str("--precision: must be one of fp32, fp16, bf16, bf16-pure, got '", name, "'"));
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
    case Precision::bf16_pure: return "bf16-pure";
  }
  return "?";
}

std::optional<DType> compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp32: return std::nullopt;
    case Precision::fp16: return DType::f16;
    case Precision::bf16:
    case Precision::bf16_pure: return DType::bf16;
  }
  return std::nullopt;
}

}  // namespace weft::amp
