// Running the `weft` executable the way a user does, for the tests in tests/cli/.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "expect_error.h"

namespace weft::testing {

struct Outcome {
  int status;
  std::string output;  // stdout and stderr together
};

// With `stdout_file`, stdout goes there and the outcome carries stderr alone.
inline Outcome weft_cli(const std::string& args, const std::string& stdout_file = "") {
  std::string command = std::string(WEFT_CLI_PATH) + " " + args + " 2>&1" + (stdout_file.empty() ? "" : " >" + stdout_file);
  Outcome outcome{-1, {}};
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return outcome;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) outcome.output.append(buffer, n);
  int status = pclose(pipe);
  outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

// The JSON object a command printed as its last line (--json).
inline nlohmann::json last_line_json(const std::string& output) {
  const size_t start = output.rfind('\n', output.size() - 2);
  return nlohmann::json::parse(output.substr(start == std::string::npos ? 0 : start + 1));
}

// The error line, and that it is the only thing printed.
inline void expect_usage_error(const Outcome& o, const std::string& says) {
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_TRUE(contains(o.output, says)) << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
}

// The default `--help` shows for `flag`: CLI11's "--flag TYPE=VALUE", else the description's
// "(default VALUE)" or "(default: VALUE)"; "" when it shows none.
inline std::string help_default(const std::string& help, const std::string& flag) {
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string names, type;
    words >> names >> type;
    if (!contains("," + names + ",", "," + flag + ",")) continue;
    if (const size_t equals = type.find('='); equals != std::string::npos) return type.substr(equals + 1);
    std::string description = line, next;
    if (std::getline(lines, next) && next.starts_with("        ")) description += next;  // wrapped below the name
    for (const std::string opening : {"(default ", "(default: "})
      if (const size_t at = description.find(opening); at != std::string::npos) {
        const size_t start = at + opening.size();
        return description.substr(start, description.find_first_of(");", start) - start);
      }
    return "";
  }
  ADD_FAILURE() << flag << " is not in the help:\n" << help;
  return "";
}

}  // namespace weft::testing
