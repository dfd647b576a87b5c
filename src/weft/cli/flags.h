// Numeric flags of weft's subcommands: each is registered here, so that its text is read by
// parse_flag (core/flag_value.h) as CLI11 parses the command line. A value the flag cannot take is
// refused then, before anything is loaded, in the one format of every refusal:
//     weft: --threads: must be a non-negative whole number, got '-4'
// Without `accepts`, a flag takes whatever its type holds; the option type behind it checks the
// rest (train::TrainOptions::validate, nn::GenerateOptions::check). A flag left out keeps the
// target's value (shown in --help); an optional target stays unset. one_of and not_empty refuse
// names and paths in the same format.
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/core/flag_value.h"
#include "weft/core/suggest.h"
#include "weft/io/atomic_file.h"
#include "weft/memory/planner.h"

namespace weft::cli {

// The number of devices (GPUs, or CPUs for --device cpu), as every command that plans for several
// names it; --world and --count are the names plan and estimate used before.
inline const std::string kGpusFlag = "--gpus,--world,--count";

template <typename T>
struct FlagValueType {
  using type = T;
};
template <typename T>
struct FlagValueType<std::optional<T>> {
  using type = T;
};

// `target` is a T (int, int64_t, uint64_t, double) or a std::optional<T>.
template <typename Target, typename T = typename FlagValueType<Target>::type>
CLI::Option* number_flag(CLI::App* app, const std::string& name, Target& target, const std::string& help,
                         std::type_identity_t<Accepts<T>> accepts = {}) {
  const std::string flag = name.substr(0, name.find(','));
  CLI::Option* option = app->add_option_function<std::string>(
      name, [&target, flag, accepts](const std::string& text) { target = parse_flag<T>(flag, text, accepts); }, help);
  option->type_name(std::is_integral_v<T> ? "INT" : "NUMBER");
  if constexpr (std::is_same_v<Target, T>)
    option->default_str(std::is_floating_point_v<T> ? shortest(static_cast<double>(target)) : std::to_string(target));
  return option;
}

// A parameter count, read alike wherever a command takes one: 124M, 7B, 70e9
// (memory::parse_parameter_count).
template <typename Target>
CLI::Option* parameter_count_flag(CLI::App* app, const std::string& name, Target& target, const std::string& help) {
  return app->add_option_function<std::string>(
                name, [&target](const std::string& text) { target = memory::parse_parameter_count(text); }, help)
      ->type_name("COUNT");
}

// For ->check(): a path or name whose empty value would read as the flag left out (`--out ''`
// would train without saving).
inline CLI::Validator not_empty() {
  return CLI::Validator(
      [](const std::string& value) -> std::string { return value.empty() ? "must not be empty, got ''" : ""; }, "");
}

// Refuses the file a flag names for writing before any work is done, in the one format:
//     weft: --out /dev/null: is a character device; weft writes only regular files
// (io::why_not_replaceable; mark the command's inputs first). An existing file is replaced only
// when `overwrite` says so.
inline void check_output_file(const std::string& flag, const std::string& path, bool overwrite = true) {
  if (const std::optional<std::string> why = io::why_not_replaceable(path)) throw ValueError(str(flag, " ", path, ": ", *why));
  std::error_code error;
  WEFT_CHECK(overwrite || !std::filesystem::exists(path, error), ValueError, flag, " ", path,
             ": exists already; pass --overwrite to replace it");
}

// For ->check(): a flag that takes one of `names`, refused as "--model: must be one of mlp, cnn,
// gpt, got 'gtp'; did you mean gpt?".
inline CLI::Validator one_of(const std::vector<std::string>& names) {
  std::string listed, choices;
  for (const std::string& name : names) {
    listed += (listed.empty() ? "" : ", ") + name;
    choices += (choices.empty() ? "" : "|") + name;
  }
  return CLI::Validator(
      [names, listed](const std::string& value) -> std::string {
        if (std::find(names.begin(), names.end(), value) != names.end()) return "";
        return "must be one of " + listed + ", got '" + value + "'" + did_you_mean(closest_names(value, names));
      },
      "{" + choices + "}");
}

}  // namespace weft::cli
