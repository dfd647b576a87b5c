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
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/core/flag_value.h"

namespace weft::cli {

template <typename T>
CLI::Option* number_flag(CLI::App* app, const std::string& name, T& target, const std::string& help,
                         std::type_identity_t<Accepts<T>> accepts = {}) {
  const std::string flag = name.substr(0, name.find(','));
  return app
      ->add_option_function<std::string>(
          name, [&target, flag, accepts](const std::string& text) { target = parse_flag<T>(flag, text, accepts); },
          help)
      ->type_name(std::is_integral_v<T> ? "INT" : "NUMBER")
      ->default_str(std::is_floating_point_v<T> ? shortest(static_cast<double>(target)) : std::to_string(target));
}

template <typename T>
CLI::Option* number_flag(CLI::App* app, const std::string& name, std::optional<T>& target, const std::string& help,
                         std::type_identity_t<Accepts<T>> accepts = {}) {
  const std::string flag = name.substr(0, name.find(','));
  return app
      ->add_option_function<std::string>(
          name, [&target, flag, accepts](const std::string& text) { target = parse_flag<T>(flag, text, accepts); },
          help)
      ->type_name(std::is_integral_v<T> ? "INT" : "NUMBER");
}

// For ->check(): a path or name whose empty value would read as the flag left out (`--out ''`
// would train without saving).
inline CLI::Validator not_empty() {
  return CLI::Validator(
      [](const std::string& value) -> std::string { return value.empty() ? "must not be empty, got ''" : ""; }, "");
}

// For ->check(): a flag that takes one of `names`, refused as "--model: must be one of mlp, cnn,
// gpt, got 'foo'".
inline CLI::Validator one_of(const std::vector<std::string>& names) {
  std::string listed, choices;
  for (const std::string& name : names) {
    listed += (listed.empty() ? "" : ", ") + name;
    choices += (choices.empty() ? "" : "|") + name;
  }
  return CLI::Validator(
      [names, listed](const std::string& value) -> std::string {
        if (std::find(names.begin(), names.end(), value) != names.end()) return "";
        return "must be one of " + listed + ", got '" + value + "'";
      },
      "{" + choices + "}");
}

}  // namespace weft::cli
