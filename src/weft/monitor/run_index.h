// The runs under weft board's log directory and their scalars, kept between refreshes so that
// each refresh lists the directory again but reads only the bytes appended since the last one.
// Whatever is under the directory, a refresh is bounded and does not fail as a whole:
// - the walk follows symbolic links but enters each directory (st_dev, st_ino) once, goes at most
//   kMaxDepth levels down and looks at kMaxEntries entries at most; an entry it cannot use (a
//   link loop, an unreadable directory, an event file that is a FIFO) is passed over and noted;
// - each refresh decodes at most bytes_per_refresh of event records over all files, so a huge
//   file is caught up over several refreshes, and a corrupt record stops its file's reading there,
//   with a note, while the records before it still plot;
// - a tag keeps at most points_per_tag points (see add_point in run_index.cpp), and a run at most
//   tags_per_run tags; the tags past that are noted and not plotted.
// Names in the JSON are relative to the log directory, and bytes that are not UTF-8 are replaced.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/io/tensorboard.h"

namespace weft::monitor {

struct RunIndexLimits {
  uint64_t bytes_per_refresh = 64 << 20;
  size_t points_per_tag = 1000;  // TensorBoard's default for scalars
  size_t tags_per_run = 1000;    // a chart each: more than a page can show
};

class RunIndex {
 public:
  static constexpr int kMaxDepth = 16;
  static constexpr size_t kMaxEntries = 100000;

  explicit RunIndex(std::string log_dir, RunIndexLimits limits = {});

  // Lists the log directory again and reads what its event files gained; IOError when it is not
  // a directory (any more).
  void refresh();
  // refresh(), then the body of GET /api/runs: {"logdir": as given, "runs": [{"name", "tags":
  // {tag: [[step, wall_time, value], ...]}}], "skipped": [{"file", "reason"}]}. Runs without
  // scalars are left out; NaN and the infinities are the strings "NaN", "Infinity", "-Infinity".
  // Safe to call from several threads.
  std::string runs_json();

  // As of the last refresh: whether any directory holds event files, and the runs the page shows
  // (those with scalars) in its order, natural_less's.
  bool found_event_files() const;
  std::vector<std::string> shown_runs() const;

 private:
  struct Point {
    int64_t step;
    double wall_time;
    float value;
  };
  struct Reservoir {
    std::vector<Point> points;
    uint64_t seen = 0;
    uint64_t random_state = 0;
  };
  struct FileState {
    uint64_t device, inode, size;
    int64_t modified_ns;
    io::EventFileReader reader;
    bool caught_up = false;  // read to the end that the walk saw, not stopped by the budget
    bool stopped = false;    // at a corrupt record
    std::string note{};      // why it was stopped, or could not be opened
  };
  struct Run {
    std::map<std::string, FileState> files;  // by file name
    std::map<std::string, Reservoir> tags;
    bool dropped_tags = false;  // past tags_per_run
  };
  struct FoundFile {
    std::string name;
    uint64_t device, inode, size;
    int64_t modified_ns;
  };
  using Listing = std::map<std::string, std::vector<FoundFile>>;  // run -> its event files, in name order

  static Listing walk(const std::string& log_dir, std::map<std::string, std::string>& notes);

  void update();
  void read_run(Run& run, const std::vector<FoundFile>& files, const std::string& name, uint64_t& budget);
  void add_point(Reservoir& reservoir, const Point& point) const;
  nlohmann::json board() const;

  std::string log_dir_;
  RunIndexLimits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, Run> runs_;
  std::map<std::string, std::string> walk_notes_;  // path below log_dir -> why it was passed over
};

// "run2" before "run10", "lr0.05" before "lr0.1": numbers (with their decimals) compare as
// numbers, everything else byte by byte.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace weft::monitor
