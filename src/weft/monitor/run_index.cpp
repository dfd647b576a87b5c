#include "weft/monitor/run_index.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <set>

#include "weft/core/error.h"

namespace weft::monitor {

namespace {

constexpr const char* kEventFilePrefix = "events.out.tfevents.";

bool is_digit(char c) { return c >= '0' && c <= '9'; }

uint64_t next_random(uint64_t& state) {  // splitmix64
  uint64_t z = state += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (!is_digit(a[i]) || !is_digit(b[j])) {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i, ++j;
      continue;
    }
    // A number with its decimals, if any: runs are often named by a learning rate (lr0.05, lr0.1).
    const auto number = [](const std::string& s, size_t& at) {
      while (at + 1 < s.size() && s[at] == '0' && is_digit(s[at + 1])) ++at;
      const size_t start = at;
      while (at < s.size() && is_digit(s[at])) ++at;
      const std::string_view whole = std::string_view(s).substr(start, at - start);
      if (at + 1 >= s.size() || s[at] != '.' || !is_digit(s[at + 1])) return std::pair(whole, std::string_view());
      const size_t point = ++at;
      while (at < s.size() && is_digit(s[at])) ++at;
      return std::pair(whole, std::string_view(s).substr(point, at - point));
    };
    const auto [x, x_decimals] = number(a, i);
    const auto [y, y_decimals] = number(b, j);
    if (x.size() != y.size()) return x.size() < y.size();
    if (x != y) return x < y;
    if (x_decimals != y_decimals) return x_decimals < y_decimals;
  }
  if (i < a.size() || j < b.size()) return i == a.size();
  return a < b;  // "run01" and "run1": any fixed order
}

// The directories under log_dir holding event files ("." is log_dir itself), each with its files
// in name order (the order of their creation times, as TensorBoard reads them); the entries passed
// over go to notes, with why. Breadth first with each directory's entries sorted, so that a
// directory reached by two paths (a symbolic link to it) is listed under the same, shortest, name
// on every refresh. Links are followed, since runs are often linked into a log directory, but
// each directory is entered once.
RunIndex::Listing RunIndex::walk(const std::string& log_dir, std::map<std::string, std::string>& notes) {
  Listing runs;
  struct stat top;
  WEFT_CHECK(::stat(log_dir.c_str(), &top) == 0 && S_ISDIR(top.st_mode), IOError, "--logdir ", log_dir,
             ": not a directory");
  std::set<std::pair<uint64_t, uint64_t>> entered{{top.st_dev, top.st_ino}};
  std::deque<std::pair<std::string, int>> pending{{"", 0}};  // a directory below log_dir, its depth
  size_t entries = 0;
  while (!pending.empty()) {
    const auto [dir, depth] = pending.front();
    pending.pop_front();
    const std::string shown = dir.empty() ? "." : dir;
    DIR* handle = ::opendir((log_dir + "/" + dir).c_str());
    if (!handle) {
      notes[shown] = str("cannot list it: ", std::strerror(errno));
      continue;
    }
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(handle)) {
      const std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (++entries > kMaxEntries) break;
      names.push_back(name);
    }
    ::closedir(handle);
    if (entries > kMaxEntries) {
      notes[shown] = str("listing stopped after ", kMaxEntries, " entries under --logdir");
      return runs;
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string path = dir.empty() ? name : dir + "/" + name;
      struct stat info;
      if (::stat((log_dir + "/" + path).c_str(), &info) != 0) {
        notes[path] = std::strerror(errno);
      } else if (S_ISDIR(info.st_mode)) {
        if (!entered.insert({info.st_dev, info.st_ino}).second) continue;  // a link back, or a second name
        if (depth + 1 > kMaxDepth) notes[path] = str("more than ", kMaxDepth, " levels below --logdir");
        else pending.emplace_back(path, depth + 1);
      } else if (name.starts_with(kEventFilePrefix)) {
        if (!S_ISREG(info.st_mode)) notes[path] = "not a regular file";
        else runs[shown].push_back({name, info.st_dev, info.st_ino, static_cast<uint64_t>(info.st_size),
                                    info.st_mtim.tv_sec * 1'000'000'000ll + info.st_mtim.tv_nsec});
      }
    }
  }
  return runs;
}

RunIndex::RunIndex(std::string log_dir, RunIndexLimits limits) : log_dir_(std::move(log_dir)), limits_(limits) {}

void RunIndex::refresh() {
  std::lock_guard lock(mutex_);
  update();
}

std::string RunIndex::runs_json() {
  std::lock_guard lock(mutex_);
  update();
  // Names are whatever bytes the file system holds; JSON must be UTF-8.
  return board().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool RunIndex::found_event_files() const {
  std::lock_guard lock(mutex_);
  return !runs_.empty();
}

std::vector<std::string> RunIndex::shown_runs() const {
  std::lock_guard lock(mutex_);
  const nlohmann::json shown = board();
  std::vector<std::string> names;
  for (const auto& run : shown["runs"]) names.push_back(run["name"]);
  return names;
}

void RunIndex::update() {
  std::map<std::string, std::string> notes;
  const Listing found = walk(log_dir_, notes);
  walk_notes_ = std::move(notes);
  std::erase_if(runs_, [&](const auto& run) { return !found.contains(run.first); });
  std::vector<std::string> names;
  for (const auto& [name, files] : found) names.push_back(name);
  std::sort(names.begin(), names.end(), natural_less);
  uint64_t budget = limits_.bytes_per_refresh;
  for (const std::string& name : names) read_run(runs_[name], found.at(name), name, budget);
}

void RunIndex::read_run(Run& run, const std::vector<FoundFile>& files, const std::string& name, uint64_t& budget) {
  const auto changed = [](const FileState& state, const FoundFile& file) {
    return state.size != file.size || state.modified_ns != file.modified_ns;
  };
  const auto wants_reading = [&](const FileState& state, const FoundFile& file) {
    return !state.stopped && (!state.caught_up || changed(state, file));
  };
  // Records must be taken in the files' order, since a session start in one drops points read
  // from the ones before it. A file that vanished, was replaced or shrank, or that has more to
  // read while a later file has been read, breaks that order: the run is then read again.
  bool reread = std::any_of(run.files.begin(), run.files.end(), [&](const auto& known) {
    return std::none_of(files.begin(), files.end(), [&](const FoundFile& file) { return file.name == known.first; });
  });
  for (size_t i = 0; i < files.size() && !reread; ++i) {
    const auto it = run.files.find(files[i].name);
    if (it == run.files.end()) {
      reread = std::any_of(run.files.begin(), run.files.end(), [&](const auto& f) { return f.first > files[i].name; });
      continue;
    }
    const FileState& state = it->second;
    reread = state.device != files[i].device || state.inode != files[i].inode || files[i].size < state.reader.offset() ||
             (wants_reading(state, files[i]) &&
              std::any_of(files.begin() + i + 1, files.end(), [&](const FoundFile& later) {
                const auto other = run.files.find(later.name);
                return other != run.files.end() && other->second.reader.offset() > 0;
              }));
  }
  if (reread) run = Run{};
  const std::string dir = name == "." ? log_dir_ : log_dir_ + "/" + name;
  for (const FoundFile& file : files) {
    const std::string path = dir + "/" + file.name;
    const FileState fresh{.device = file.device, .inode = file.inode, .size = file.size,
                          .modified_ns = file.modified_ns, .reader = io::EventFileReader(path)};
    FileState& state = run.files.try_emplace(file.name, fresh).first->second;
    if (budget == 0 || !wants_reading(state, file)) continue;
    state.size = file.size;
    state.modified_ns = file.modified_ns;
    state.note.clear();
    io::EventFile read;
    const uint64_t before = state.reader.offset();
    try {
      state.reader.read(budget, read);
      state.caught_up = read.unfinished_tail_bytes > 0 || state.reader.offset() >= file.size;
    } catch (const Error& e) {
      // The reader's message begins with the path, which the note's "file" already gives.
      std::string reason = e.what();
      if (reason.starts_with(path + ": ")) reason.erase(0, path.size() + 2);
      state.stopped = dynamic_cast<const FormatError*>(&e) != nullptr;
      state.note = state.stopped && state.reader.offset() > 0 ? reason + "; the records before it are plotted" : reason;
    }
    budget -= std::min(budget, state.reader.offset() - before);
    for (const int64_t first_step : read.session_starts) {
      for (auto tag = run.tags.begin(); tag != run.tags.end();) {
        Reservoir& reservoir = tag->second;
        const size_t kept_before = reservoir.points.size();
        std::erase_if(reservoir.points, [&](const Point& p) { return p.step >= first_step; });
        // As TensorBoard: the points seen shrink in proportion, so later points are sampled as
        // if the dropped ones had never come.
        reservoir.seen = static_cast<uint64_t>(
            std::llround(static_cast<double>(reservoir.seen) * reservoir.points.size() / kept_before));
        tag = reservoir.points.empty() ? run.tags.erase(tag) : std::next(tag);
      }
    }
    for (const io::ScalarEvent& s : read.scalars) {
      if (run.tags.size() >= limits_.tags_per_run && !run.tags.contains(s.tag)) {
        run.dropped_tags = true;
        continue;
      }
      add_point(run.tags[s.tag], {s.step, s.wall_time, s.value});
    }
  }
}

// TensorBoard's reservoir sampling (always keeping the last point): a tag keeps at most
// points_per_tag points, a uniform sample of all the steps seen, so memory, the JSON and the
// page's drawing stay bounded however long a run logs, its early steps stay as well represented
// as its late ones, and the curve always ends at the latest step.
void RunIndex::add_point(Reservoir& reservoir, const Point& point) const {
  if (reservoir.points.size() < limits_.points_per_tag) {
    reservoir.points.push_back(point);
  } else {
    const uint64_t r = next_random(reservoir.random_state) % (reservoir.seen + 1);
    if (r < limits_.points_per_tag) {
      reservoir.points.erase(reservoir.points.begin() + static_cast<ptrdiff_t>(r));
      reservoir.points.push_back(point);
    } else {
      reservoir.points.back() = point;
    }
  }
  ++reservoir.seen;
}

nlohmann::json RunIndex::board() const {
  nlohmann::json board{{"logdir", log_dir_}, {"runs", nlohmann::json::array()}, {"skipped", nlohmann::json::array()}};
  std::map<std::string, std::string> notes = walk_notes_;
  std::vector<std::string> names;
  for (const auto& [name, run] : runs_) names.push_back(name);
  std::sort(names.begin(), names.end(), natural_less);
  for (const std::string& name : names) {
    const Run& run = runs_.at(name);
    for (const auto& [file, state] : run.files)
      if (!state.note.empty()) notes[name == "." ? file : name + "/" + file] = state.note;
    if (run.dropped_tags) notes[name] = str("more than ", limits_.tags_per_run, " tags; the others are not plotted");
    if (run.tags.empty()) continue;
    nlohmann::json tags = nlohmann::json::object();
    for (const auto& [tag, reservoir] : run.tags) {
      nlohmann::json& points = tags[tag] = nlohmann::json::array();
      for (const Point& p : reservoir.points) {
        // JSON has no NaN or infinity (nlohmann would write null): they travel as JavaScript spells them.
        const nlohmann::json value = std::isnan(p.value)   ? nlohmann::json("NaN")
                                     : std::isinf(p.value) ? nlohmann::json(p.value > 0 ? "Infinity" : "-Infinity")
                                                           : nlohmann::json(static_cast<double>(p.value));
        points.push_back({p.step, p.wall_time, value});
      }
    }
    // A --logdir that is itself a run is named after its directory: "." would tell the user nothing.
    std::error_code error;
    const std::string own_name =
        std::filesystem::weakly_canonical(std::filesystem::absolute(log_dir_, error), error).filename().string();
    board["runs"].push_back({{"name", name != "." ? name : own_name.empty() || error ? log_dir_ : own_name}, {"tags", tags}});
  }
  for (const auto& [file, reason] : notes) board["skipped"].push_back({{"file", file}, {"reason", reason}});
  return board;
}

}  // namespace weft::monitor
