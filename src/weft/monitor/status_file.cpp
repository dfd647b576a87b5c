#include "weft/monitor/status_file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "weft/core/allocator.h"
#include "weft/core/error.h"
#include "weft/monitor/system.h"

namespace weft::monitor {

namespace {

namespace fs = std::filesystem;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The published file's path, empty once removed; held while writing so that a removal never races
// a rename that would bring the file back.
std::mutex published_mutex;
std::string published_path;
std::atomic<int64_t> reported_progress{0};

}  // namespace

nlohmann::json ProcessStatus::to_json() const {
  return {{"pid", pid},
          {"proc_start_ticks", proc_start_ticks},
          {"started_unix_s", started_unix_s},
          {"updated_unix_s", updated_unix_s},
          {"command", command},
          {"model", model},
          {"progress_name", progress_name},
          {"progress", progress},
          {"rss_bytes", rss_bytes},
          {"allocated_bytes", allocated_bytes},
          {"reserved_bytes", reserved_bytes},
          {"peak_allocated_bytes", peak_allocated_bytes},
          {"num_ooms", num_ooms}};
}

ProcessStatus ProcessStatus::from_json(const nlohmann::json& j) {
  try {
    ProcessStatus s;
    s.pid = j.at("pid").get<int64_t>();
    s.proc_start_ticks = j.at("proc_start_ticks").get<int64_t>();
    s.started_unix_s = j.at("started_unix_s").get<double>();
    s.updated_unix_s = j.at("updated_unix_s").get<double>();
    s.command = j.at("command").get<std::string>();
    s.model = j.at("model").get<std::string>();
    s.progress_name = j.at("progress_name").get<std::string>();
    s.progress = j.at("progress").get<int64_t>();
    s.rss_bytes = j.at("rss_bytes").get<int64_t>();
    s.allocated_bytes = j.at("allocated_bytes").get<int64_t>();
    s.reserved_bytes = j.at("reserved_bytes").get<int64_t>();
    s.peak_allocated_bytes = j.at("peak_allocated_bytes").get<int64_t>();
    s.num_ooms = j.at("num_ooms").get<int64_t>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(str("a weft process status: ", e.what()));
  }
}

std::string status_directory() {
  if (const char* dir = std::getenv("WEFT_SMI_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime != '\0')
    return std::string(runtime) + "/weft-smi";
  return "/tmp/weft-smi";
}

std::optional<int64_t> process_start_ticks(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  // The command name (field 2) is in parentheses and may itself hold spaces and ')': the fields
  // after it start past the last ')'. There, field 3 (the state) is the first and field 22 the
  // twentieth.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return std::nullopt;
    // A killed process stays in /proc as a zombie until its parent reaps it, but runs no more.
    if (i == 3 && (field == "Z" || field == "X")) return std::nullopt;
  }
  return std::stoll(field);
}

bool is_alive(const ProcessStatus& status) {
  const std::optional<int64_t> ticks = process_start_ticks(status.pid);
  return ticks && *ticks == status.proc_start_ticks;
}

std::vector<ProcessStatus> read_statuses(const std::string& directory) {
  std::vector<ProcessStatus> live;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, ec)) {
    if (entry.path().extension() != ".json") continue;  // a writer's temporary, or not ours
    std::ifstream in(entry.path());
    std::optional<ProcessStatus> status;
    try {
      status = ProcessStatus::from_json(nlohmann::json::parse(in));
    } catch (const std::exception&) {
      continue;  // unreadable: not a status weft wrote
    }
    if (is_alive(*status)) {
      live.push_back(*status);
    } else {
      fs::remove(entry.path(), ec);
    }
  }
  std::sort(live.begin(), live.end(), [](const ProcessStatus& a, const ProcessStatus& b) { return a.pid < b.pid; });
  return live;
}

StatusPublisher::StatusPublisher(std::string command, std::string model, std::string progress_name) {
  status_.pid = getpid();
  status_.proc_start_ticks = process_start_ticks(status_.pid).value_or(0);
  status_.started_unix_s = unix_seconds();
  status_.command = std::move(command);
  status_.model = std::move(model);
  status_.progress_name = std::move(progress_name);
  reported_progress = 0;
  const std::string directory = status_directory();
  std::error_code ec;
  fs::create_directories(directory, ec);
  // Publishing is a courtesy to `weft smi`: a directory that cannot be made or written leaves the
  // command running unseen rather than failing it.
  if (ec) return;
  path_ = directory + "/" + std::to_string(status_.pid) + ".json";
  {
    const std::lock_guard<std::mutex> lock(published_mutex);
    published_path = path_;
  }
  write_now();
  thread_ = std::thread([this] { run(); });
}

StatusPublisher::~StatusPublisher() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  remove_published_status();
}

void StatusPublisher::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) write_now();
}

void StatusPublisher::write_now() {
  const MemoryStats memory = CachingAllocator::cpu().stats();
  status_.updated_unix_s = unix_seconds();
  status_.progress = reported_progress;
  status_.rss_bytes = current_rss_bytes();
  status_.allocated_bytes = memory.allocated_bytes;
  status_.reserved_bytes = memory.reserved_bytes;
  status_.peak_allocated_bytes = memory.peak_allocated_bytes;
  status_.num_ooms = memory.num_ooms;
  const std::string text = status_.to_json().dump() + "\n";
  const std::lock_guard<std::mutex> lock(published_mutex);
  if (published_path.empty()) return;
  // No fsync: the file describes a running process and means nothing after a reboot.
  const std::string temporary = published_path + ".tmp";
  std::FILE* f = std::fopen(temporary.c_str(), "w");
  if (f == nullptr) return;
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written || std::rename(temporary.c_str(), published_path.c_str()) != 0)
    std::remove(temporary.c_str());
}

void report_progress(int64_t count) { reported_progress = count; }

void count_progress() { ++reported_progress; }

void remove_published_status() {
  const std::lock_guard<std::mutex> lock(published_mutex);
  if (published_path.empty()) return;
  std::remove(published_path.c_str());
  published_path.clear();
}

}  // namespace weft::monitor
