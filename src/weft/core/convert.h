// convert<To>(from): the one element conversion every cast uses. 16-bit floats go through f32
// (round-to-nearest-even on the way back); bool is "not zero".
#pragma once
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
  } else {
    return static_cast<To>(from);
  }
}

}  // namespace weft
