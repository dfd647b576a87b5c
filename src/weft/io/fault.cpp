#include "weft/io/fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace weft::io {

namespace {

std::atomic<int64_t> fault_at{0};
std::atomic<int64_t> seen{0};
std::atomic<bool> kill_mode{false};
std::once_flag environment_read;

void read_environment() {
  const char* value = std::getenv("WEFT_FAULT_AT");
  if (value == nullptr) return;
  char* end = nullptr;
  long long n = std::strtoll(value, &end, 10);
  if (end == value || n <= 0 || (*end != '\0' && std::strcmp(end, ":kill") != 0)) return;
  kill_mode = *end != '\0';
  fault_at = n;
}

}  // namespace

void inject_fault_at(int64_t n, FaultMode mode) {
  std::call_once(environment_read, [] {});  // a test's setting wins over the environment
  kill_mode = mode == FaultMode::kill;
  seen = 0;
  fault_at = n;
}

int64_t fault_points_seen() { return seen; }

bool should_fail(const char* what, const std::string& path) {
  std::call_once(environment_read, read_environment);
  const int64_t n = ++seen;
  if (fault_at.load(std::memory_order_relaxed) != n) return false;
  if (kill_mode) {
    std::fprintf(stderr, "weft: injected kill at operation %lld (%s %s)\n", static_cast<long long>(n), what,
                 path.c_str());
    ::kill(::getpid(), SIGKILL);
  }
  return true;
}

}  // namespace weft::io
