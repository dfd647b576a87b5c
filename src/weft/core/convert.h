// convert<To>(from): the one element conversion every cast uses. 16-bit floats go through f32
// (round-to-nearest-even on the way back); bool is "not zero"; a float becomes an integer by
// truncation toward zero, saturating at the integer's range, NaN giving 0 (C++ leaves an
// out-of-range cast undefined; this is what Rust's `as` defines).
#pragma once
#include <limits>
#include <type_traits>

#include "weft/core/dtype.h"

namespace weft {

template <typename T>
constexpr bool is_half_like = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The type arithmetic on T is done in: float for the 16-bit formats, T itself otherwise.
template <typename T>
using compute_type = std::conditional_t<is_half_like<T>, float, T>;

template <typename To, typename From>
inline To convert(From from) {
  if constexpr (std::is_same_v<To, From>) {
    return from;
  } else if constexpr (is_half_like<To>) {
    return To(static_cast<float>(from));
  } else if constexpr (is_half_like<From>) {
    return convert<To>(static_cast<float>(from));
  } else if constexpr (std::is_same_v<To, bool>) {
    return from != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    // The integer's max rounds up in From (2^31 - 1 becomes 2^31 in float): >= keeps it exact.
    if (from != from) return To(0);
    if (from <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (from >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(from);
  } else {
    return static_cast<To>(from);
  }
}

}  // namespace weft
