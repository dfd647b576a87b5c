// A background save run with the n-th I/O operation failing (io/fault.h): what it threw, whether
// the failure came after the save had started its thread, and how many operations it reached.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "weft/core/error.h"
#include "weft/io/fault.h"

namespace weft::testing {

struct FaultedSave {
  std::string message;  // the IOError's; "" when the save passed
  bool started = false;  // `start` returned: the failure, if any, came from `wait`
  int64_t seen = 0;      // the operations the save reached
};

inline FaultedSave save_failing_at(int64_t n, const std::function<void()>& start, const std::function<void()>& wait) {
  FaultedSave out;
  io::inject_fault_at(n);
  try {
    start();
    out.started = true;
    wait();
  } catch (const IOError& e) {
    out.message = e.what();
  }
  out.seen = io::fault_points_seen();
  io::inject_fault_at(0);
  return out;
}

}  // namespace weft::testing
