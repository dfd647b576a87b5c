// Running the `weft` executable as a user does: its exit status and everything it printed.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace weft::testing {

struct Outcome {
  int status;
  std::string output;  // stdout and stderr together
};

inline Outcome weft_cli(const std::string& args) {
  std::string command = std::string(WEFT_CLI_PATH) + " " + args + " 2>&1";
  Outcome outcome{-1, {}};
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return outcome;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) outcome.output.append(buffer, n);
  int status = pclose(pipe);
  outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

}  // namespace weft::testing
