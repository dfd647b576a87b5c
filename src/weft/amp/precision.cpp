#include "weft/amp/precision.h"

#include "weft/core/error.h"

namespace weft::amp {

Precision parse_precision(std::string_view name, std::span<const Precision> accepted) {
  for (Precision p : accepted)
    if (name == precision_name(p) || (name == "f32" && p == Precision::fp32) || (name == "f16" && p == Precision::fp16))
      return p;
  throw ValueError(str("--precision: must be one of ", precision_names(accepted, ", "), ", got '", name, "'"));
}

std::string precision_names(std::span<const Precision> accepted, std::string_view separator) {
  std::string names;
  for (Precision p : accepted) names += str(names.empty() ? "" : separator, precision_name(p));
  return names;
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
