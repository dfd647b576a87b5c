// What each running weft process publishes about itself for `weft smi`: a small JSON file per
// process, <directory>/<pid>.json, rewritten about once a second by a background thread and
// removed when the process ends normally or on SIGTERM / SIGINT (train/stop_signals.h calls
// remove_published_status before the signal ends it).
//
// The directory is $WEFT_SMI_DIR, else $XDG_RUNTIME_DIR/weft-smi, else /tmp/weft-smi. Each write
// goes to a temporary file in the same directory that is renamed over the target, so a reader
// sees a whole old or a whole new file, never a torn one.
//
// A process killed with SIGKILL leaves its file behind. The file therefore records the process's
// start time as /proc/<pid>/stat gives it (clock ticks after boot): a file whose pid no longer
// runs, or runs a different process started at another time (a recycled pid), is stale, and
// readers skip it and remove it.
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
  // A malformed object → FormatError.
  static ProcessStatus from_json(const nlohmann::json& j);
};

// Where statuses are published and read (see above).
std::string status_directory();

// Field 22 of /proc/<pid>/stat, or nullopt when that process does not exist or has ended (a
// zombie its parent has not reaped yet).
std::optional<int64_t> process_start_ticks(int64_t pid);

// False when the process the status describes no longer runs (its pid is gone or now belongs to a
// process with another start time).
bool is_alive(const ProcessStatus& status);

// The live statuses in `directory`, by pid; stale and unreadable files are skipped, and stale ones
// removed (removal failing, e.g. another user's file, is not an error). A missing directory is
// an empty list.
std::vector<ProcessStatus> read_statuses(const std::string& directory);

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
  std::string path_;
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
