// A status of the test's own process (weft_tests: a weft binary of this user's, running now), as
// a publisher would write it: what weft smi must list.
#pragma once
#include <unistd.h>

#include <chrono>

#include "weft/monitor/status_file.h"

namespace weft::testing {

inline monitor::ProcessStatus status_of_this_process() {
  monitor::ProcessStatus s;
  s.pid = getpid();
  s.proc_start_ticks = monitor::process_start_ticks(s.pid).value();
  s.started_unix_s = s.updated_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  s.command = "train";
  s.model = "mlp";
  s.progress_name = "step";
  return s;
}

}  // namespace weft::testing
