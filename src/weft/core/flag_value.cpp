#include "weft/core/flag_value.h"

#include <charconv>
#include <cmath>

#include "weft/core/error.h"

namespace weft {

namespace {

template <typename T>
std::string text_of(T value) {
  if constexpr (std::is_floating_point_v<T>) return shortest(value);
  else return std::to_string(value);
}

// Which side of the range a value fell off: below it, above it, or neither (not a number).
enum class Side { below, above, neither };

// What the flag takes, in words. A bound is named when it is the flag's own, or when the value
// went past it.
template <typename T>
std::string expectation(const Accepts<T>& a, Side side) {
  using Limits = std::numeric_limits<T>;
  if constexpr (std::is_integral_v<T>) {
    if (a.max != Limits::max() || (side == Side::above && a.min != Limits::lowest()))
      return str("a whole number from ", text_of(a.min), " to ", text_of(a.max));
    if (side == Side::above) return str("a whole number of at most ", text_of(a.max));
    if (a.min == 0) return "a non-negative whole number";
    if (a.min == 1) return "a positive whole number";
    if (a.min == Limits::lowest() && side != Side::below) return "a whole number";
    return str("a whole number of at least ", text_of(a.min));
  } else {
    if (std::isfinite(a.max))
      return str("a number in ", a.min_open ? "(" : "[", shortest(a.min), ", ", shortest(a.max), a.max_open ? ")" : "]");
    if (!std::isfinite(a.min)) return "a number";
    if (a.min == 0) return a.min_open ? "a finite positive number" : "a finite non-negative number";
    return str("a finite number ", a.min_open ? "greater than " : "of at least ", shortest(a.min));
  }
}

[[noreturn]] void refuse(std::string_view flag, const std::string& expected, std::string_view given) {
  throw ValueError(str(flag, ": must be ", expected, ", got '", given, "'"));
}

template <typename T>
bool takes_anything(const Accepts<T>& a) {
  return a.min == Accepts<T>{}.min && a.max == Accepts<T>{}.max;
}

template <typename T>
bool takes(const Accepts<T>& a, T value) {
  if (takes_anything(a)) return true;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(value)) return false;
  return (a.min_open ? value > a.min : value >= a.min) && (a.max_open ? value < a.max : value <= a.max);
}

}  // namespace

std::string shortest(double value) {
  char buf[32];
  const auto [end, error] = std::to_chars(buf, buf + sizeof buf, value);
  return error == std::errc() ? std::string(buf, end) : std::string("?");
}

template <typename T>
T parse_flag(std::string_view flag, std::string_view text, std::type_identity_t<Accepts<T>> accepts) {
  std::string_view digits = text;
  if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-') digits.remove_prefix(1);
  T value{};
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  const bool whole = error == std::errc() && end == digits.data() + digits.size();
  if (error == std::errc::result_out_of_range) {
    if constexpr (std::is_integral_v<T>)
      refuse(flag, expectation(accepts, digits[0] == '-' ? Side::below : Side::above), text);
    else if (takes_anything(accepts))
      refuse(flag, "a number within a double's range, 2.2e-308 to 1.8e+308 in magnitude", text);
  }
  if (!whole) refuse(flag, expectation(accepts, Side::neither), text);
  if (!takes(accepts, value))
    refuse(flag, expectation(accepts, value > accepts.max ? Side::above : Side::below), text);
  return value;
}

template <typename T>
void check_flag(std::string_view flag, T value, std::type_identity_t<Accepts<T>> accepts) {
  if (!takes(accepts, value))
    refuse(flag, expectation(accepts, value > accepts.max ? Side::above : Side::below), text_of(value));
}

template int parse_flag<int>(std::string_view, std::string_view, Accepts<int>);
template int64_t parse_flag<int64_t>(std::string_view, std::string_view, Accepts<int64_t>);
template uint64_t parse_flag<uint64_t>(std::string_view, std::string_view, Accepts<uint64_t>);
template double parse_flag<double>(std::string_view, std::string_view, Accepts<double>);
template void check_flag<int>(std::string_view, int, Accepts<int>);
template void check_flag<int64_t>(std::string_view, int64_t, Accepts<int64_t>);
template void check_flag<uint64_t>(std::string_view, uint64_t, Accepts<uint64_t>);
template void check_flag<double>(std::string_view, double, Accepts<double>);

}  // namespace weft
