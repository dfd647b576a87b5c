// A number given for a flag, read from its text and checked against what the flag accepts, with
// one message for every refusal: the flag, what it takes, and what was given.
//     --batch-size: must be a positive whole number, got '0'
//     --lr: must be a finite positive number, got 'inf'
//     --steps: must be a whole number from 1 to 1000000000000, got '99999999999999999999'
// The error is a ValueError; `weft` prints it after "weft: " and exits with status 2. The CLI
// parses every numeric flag with parse_flag (cli/flags.h); option types that library callers fill
// directly (train::TrainOptions, nn::GenerateOptions, nn::GPTConfig, memory::PlanRequest) check
// their fields with check_flag, so both paths refuse alike.
//
// Whole numbers are decimal digits with an optional sign: '010' is ten (not octal eight), and
// '1e3', '0x10' and '12abc' are refused, as is anything the type cannot hold. Reals are decimal or
// scientific numbers, inf or nan (which a range refuses).
// Numbers in messages print in their shortest form (1e+300, not 300 digits).
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

namespace weft {

// The values a flag takes: from min to max, both included unless marked open, and for reals
// finite. Left as it is, it takes whatever T holds, reals' inf and nan too: for a flag whose
// option type checks the range itself (train::TrainOptions::validate). T is int, int64_t,
// uint64_t or double.
template <typename T>
struct Accepts {
  T min = std::is_floating_point_v<T> ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
  T max = std::is_floating_point_v<T> ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
  bool min_open = false, max_open = false;
};

// `text` as a T that `accepts` takes, else ValueError naming `flag`.
template <typename T>
T parse_flag(std::string_view flag, std::string_view text, std::type_identity_t<Accepts<T>> accepts = {});

// ValueError naming `flag` unless `accepts` takes `value`.
template <typename T>
void check_flag(std::string_view flag, T value, std::type_identity_t<Accepts<T>> accepts);

// The shortest text that reads back as `value`: 0.1, 1e+300, inf, -nan.
std::string shortest(double value);

}  // namespace weft
