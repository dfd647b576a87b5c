// What each running weft process publishes about itself for `weft smi`: a small JSON file per
// process, <directory>/<pid>.json, rewritten about once a second by a background thread and
// removed when the process ends normally or on SIGTERM / SIGINT (train/stop_signals.h calls
// remove_published_status before the signal ends it).
//
// The directory is $WEFT_SMI_DIR, else $XDG_RUNTIME_DIR/weft-smi, else /tmp/weft-smi-<euid>. It
// is private: created with mode 0700, and used only if it is a real directory (not a symlink)
// owned by this process's effective user with no group or other access (a publisher makes one
// that others could read but not write 0700). Otherwise the process runs unpublished, after one
// warning, and `weft smi` reads nothing from it. Each write goes to a
// temporary file in that directory, created with O_EXCL | O_NOFOLLOW and mode 0600 (what was left
// at its name is removed first), that is renamed over the target, so a reader sees a whole old or
// a whole new file, never a torn one.
//
// A file is untrusted input to its reader: it is opened without following symlinks or waiting on
// a FIFO, at most kMaxStatusBytes long, owned by the reader's user, its JSON nesting bounded and
// every field type- and range-checked; one that fails is skipped with a note.
//
// A process killed with SIGKILL leaves its file behind. The file therefore records the process's
// start time as /proc/<pid>/stat gives it (clock ticks after boot): a file whose pid no longer
// runs, or runs a different process started at another time (a recycled pid), is stale, and
// readers skip it and remove it. Since /proc/<pid>/stat is world-readable, a matching start time
// does not prove the claim; is_alive also requires the process to belong to the reader's user and
// its executable to be weft (see there).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::monitor {

// A status weft writes is about 400 bytes; the model names of a server with many models fit.
constexpr uint64_t kMaxStatusBytes = 64 * 1024;

struct ProcessStatus {
  int64_t pid = 0;
  int64_t proc_start_ticks = 0;  // field 22 of /proc/<pid>/stat: what makes a recycled pid detectable
  double started_unix_s = 0;     // wall clock when publishing began
  double updated_unix_s = 0;     // wall clock of this write
  std::string command;           // "train", "serve", ...
  std::string model;
  std::string progress_name;     // what `progress` counts: "step" (train), "requests" (serve)
  int64_t progress = 0;
  int64_t rss_bytes = 0;         // resident set now (/proc/self/statm)
  // The CPU caching allocator (core/allocator.h) at the time of the write.
  int64_t allocated_bytes = 0, reserved_bytes = 0, peak_allocated_bytes = 0, num_ooms = 0;

  nlohmann::json to_json() const;
  // A malformed object, a field of the wrong type or out of its range (a negative size, a time
  // before 1970 or after 5138) → FormatError starting with `where`.
  static ProcessStatus from_json(const nlohmann::json& j, const std::string& where = "a weft process status");
};

// Where statuses are published and read (see above).
std::string status_directory();

// Field 22 of /proc/<pid>/stat, or nullopt when that process does not exist or has ended (a
// zombie its parent has not reaped yet).
std::optional<int64_t> process_start_ticks(int64_t pid);

// True when the process the status describes runs: its pid exists and is no zombie, with the
// status's start ticks, started no later than the status says publishing began, belongs to this
// process's effective user, and runs an executable whose name starts with "weft" (weft, or a test
// binary of it). The last two are what a forged file cannot fake: /proc/<pid>/exe is readable only
// for one's own processes (or by root), and a renamed copy of weft is, knowingly, not listed.
bool is_alive(const ProcessStatus& status);

// Why `directory` is not a private directory of this process's user (see above), or nullopt.
std::optional<std::string> why_not_private(const std::string& directory);

// The live statuses in `directory`, by pid. Stale files are removed; a file that is not a
// well-formed status of this user's (another user's, a symlink, a FIFO, too large, malformed) is
// skipped, with one line in `skipped` saying which and why. A missing directory is an empty list;
// one that is not private is read not at all, with a line in `skipped`.
std::vector<ProcessStatus> read_statuses(const std::string& directory, std::vector<std::string>* skipped = nullptr);

// Publishes this process's status under status_directory() from construction to destruction. One
// per process (the command's); the trainer and the server report their progress through
// report_progress without holding a reference to it.
class StatusPublisher {
 public:
  StatusPublisher(std::string command, std::string model, std::string progress_name);
  ~StatusPublisher();
  StatusPublisher(const StatusPublisher&) = delete;
  StatusPublisher& operator=(const StatusPublisher&) = delete;

  const std::string& path() const { return path_; }

 private:
  void write_now();
  void run();

  ProcessStatus status_;
  std::string path_;  // empty when not published
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// The progress count of this process's publisher (the trainer's step, the server's requests); a
// no-op when nothing is published.
void report_progress(int64_t count);
// Adds one to it (the server, per request answered).
void count_progress();

// Removes this process's published file now and stops further writes: for exit paths that skip
// destructors, such as a signal's default action.
void remove_published_status();

}  // namespace weft::monitor
