#include "weft/core/program.h"

namespace weft {

namespace {
std::string& name() {
  static std::string n = "weft";
  return n;
}
}  // namespace

const std::string& program_name() { return name(); }

std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                             "0123456789_./-=:,+@%") == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

void set_program_name(const char* argv0) {
  if (argv0 != nullptr && *argv0 != '\0') name() = argv0;
}

}  // namespace weft
