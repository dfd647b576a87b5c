// Fault injection for the tests of crash safety: makes the Nth filesystem operation that weft's
// atomic writers perform (atomic_file.h, checkpoint_dir.h) fail as a full disk would, or kill the
// process there as `kill -9` would, so that a test can stop a save at every write, fsync and
// rename in turn instead of hoping a timer lands between two of them.
//
// Each such operation first asks should_fail(what, path). Off by default (one relaxed atomic load
// per call); tests switch it on with inject_fault_at, and a process such as `weft train` started by
// a test switches it on with the environment variable WEFT_FAULT_AT=N (fail) or N:kill (SIGKILL),
// read once, at the first operation. Counting starts at 1 from the last inject_fault_at (or from
// process start): the Nth operation fails, the ones before and after it do not.
#pragma once
#include <cstdint>
#include <string>

namespace weft::io {

enum class FaultMode { fail, kill };

// n == 0 switches injection off. Resets the count of operations seen.
void inject_fault_at(int64_t n, FaultMode mode = FaultMode::fail);
// Operations seen since the last inject_fault_at: how many one save performs, for a test's loop.
int64_t fault_points_seen();

// True when this operation must fail (the caller then fails it with ENOSPC, through its own
// error path); in kill mode the process dies here instead of returning.
bool should_fail(const char* what, const std::string& path);

}  // namespace weft::io
