// The dtype dispatch of weft's floating-point loops: visit_floating calls fn with a value of the
// storage type (double, float, Half, BFloat16), and acc_type is the type a loop accumulates in:
// f64 for f64 (gradient checks need its precision), f32 for everything else, so 16-bit inputs are
// summed in f32 and rounded once.
#pragma once
#include <type_traits>

#include "weft/core/dtype.h"
#include "weft/core/error.h"

namespace weft::cpu {

template <typename T>
using acc_type = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Any other dtype is a DTypeError naming `op`.
template <typename Fn>
decltype(auto) visit_floating(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f64: return fn(double{});
    case DType::f32: return fn(float{});
    case DType::f16: return fn(Half{});
    case DType::bf16: return fn(BFloat16{});
    default: throw DTypeError(str(op, ": expected a floating-point tensor, got ", dtype_name(t)));
  }
}

}  // namespace weft::cpu
