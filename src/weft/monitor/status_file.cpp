#include "weft/monitor/status_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "weft/core/allocator.h"
#include "weft/core/error.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"
#include "weft/monitor/system.h"

namespace weft::monitor {

namespace {

namespace fs = std::filesystem;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The published file, by its directory (held open, so that writes land in the directory that was
// checked, whatever its name comes to mean) and name; the name is empty once removed. Held while
// writing so that a removal never races a rename that would bring the file back.
std::mutex published_mutex;
int published_directory = -1;
std::string published_name;
std::atomic<int64_t> reported_progress{0};

// Opens `directory` if it is private (see status_file.h), checking the descriptor itself so that
// nothing can be swapped in between; -1 when it does not exist, IOError saying why it is refused.
// With `repair`, a directory of this user's that others can read but not write (0755, as weft made
// it before it was private) is made 0700: nobody else can have put anything in it.
int open_private_directory(const std::string& directory, bool repair) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return -1;
  if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
    throw IOError(str(directory, ": is a symlink or not a directory; it must be a directory of its own"));
  if (fd < 0) throw IOError(str(directory, ": ", std::strerror(errno)));
  struct stat info;
  std::string why;
  if (::fstat(fd, &info) != 0) why = std::strerror(errno);
  else if (info.st_uid != ::geteuid()) why = str("belongs to uid ", info.st_uid, ", not to this user (uid ", ::geteuid(), ")");
  else if ((info.st_mode & 077) != 0 && !(repair && (info.st_mode & 022) == 0 && ::fchmod(fd, 0700) == 0))
    why = str("has mode ", std::oct, info.st_mode & 0777, std::dec, "; it must be 700 (no access for group or others)");
  if (why.empty()) return fd;
  ::close(fd);
  throw IOError(str(directory, ": ", why));
}

// The unix time the process with these start ticks began, from the boot time in /proc/stat.
std::optional<double> process_started_unix_s(int64_t start_ticks) {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key != "btime") {
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      continue;
    }
    double boot = 0;
    if (!(in >> boot)) return std::nullopt;
    return boot + static_cast<double>(start_ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  return std::nullopt;
}

bool is_status_name(const std::string& name) {
  const size_t digits = name.size() - 5;
  return name.size() > 5 && name.size() <= 15 && name.ends_with(".json") &&
         name.find_first_not_of("0123456789") == digits;
}

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

ProcessStatus ProcessStatus::from_json(const nlohmann::json& j, const std::string& where) {
  constexpr int64_t kMaxPid = 1 << 22;  // Linux's PID_MAX_LIMIT
  constexpr int64_t kMaxBytes = int64_t{1} << 60;
  constexpr double kMaxUnixSeconds = 1e11;
  constexpr size_t kMaxText = 1024;
  const auto text = [&](const std::string& key) {
    std::string value = io::json_string(j, key, where);
    WEFT_CHECK(value.size() <= kMaxText, FormatError, where, ": \"", key, "\" is ", value.size(),
               " bytes, more than ", kMaxText);
    return value;
  };
  const auto bytes = [&](const std::string& key) { return io::json_integer(j, key, where, 0, kMaxBytes); };
  ProcessStatus s;
  s.pid = io::json_integer(j, "pid", where, 1, kMaxPid);
  s.proc_start_ticks = io::json_integer(j, "proc_start_ticks", where, 0);
  s.started_unix_s = io::json_number(j, "started_unix_s", where, 0, kMaxUnixSeconds);
  s.updated_unix_s = io::json_number(j, "updated_unix_s", where, 0, kMaxUnixSeconds);
  s.command = text("command");
  s.model = text("model");
  s.progress_name = text("progress_name");
  s.progress = io::json_integer(j, "progress", where, 0);
  s.rss_bytes = bytes("rss_bytes");
  s.allocated_bytes = bytes("allocated_bytes");
  s.reserved_bytes = bytes("reserved_bytes");
  s.peak_allocated_bytes = bytes("peak_allocated_bytes");
  s.num_ooms = io::json_integer(j, "num_ooms", where, 0);
  return s;
}

std::string status_directory() {
  if (const char* dir = std::getenv("WEFT_SMI_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime != '\0')
    return std::string(runtime) + "/weft-smi";
  // One per user: a shared /tmp/weft-smi would be the first user's, and others' writes into it
  // are what a private directory exists to prevent.
  return str("/tmp/weft-smi-", ::geteuid());
}

std::optional<std::string> why_not_private(const std::string& directory) {
  try {
    const int fd = open_private_directory(directory, /*repair=*/false);
    if (fd < 0) return str(directory, ": does not exist");
    ::close(fd);
    return std::nullopt;
  } catch (const IOError& e) {
    return std::string(e.what());
  }
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
  if (!ticks || *ticks != status.proc_start_ticks) return false;
  // Publishing starts after the process does; slack for the boot time's rounding to seconds.
  const std::optional<double> started = process_started_unix_s(*ticks);
  if (!started || status.started_unix_s < *started - 5) return false;
  const std::string proc = "/proc/" + std::to_string(status.pid);
  struct stat info;
  if (::stat(proc.c_str(), &info) != 0 || info.st_uid != ::geteuid()) return false;
  std::error_code error;
  const fs::path exe = fs::read_symlink(proc + "/exe", error);
  return !error && exe.filename().string().starts_with("weft");
}

std::vector<ProcessStatus> read_statuses(const std::string& directory, std::vector<std::string>* skipped) {
  std::vector<ProcessStatus> live;
  const auto skip = [&](const std::string& why) {
    if (skipped != nullptr) skipped->push_back(why);
  };
  int fd = -1;
  try {
    fd = open_private_directory(directory, /*repair=*/false);
  } catch (const IOError& e) {
    skip(str("not reading ", e.what()));
    return live;
  }
  if (fd < 0) return live;
  ::close(fd);
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (!is_status_name(name)) continue;  // a writer's temporary, or not ours
    const std::string path = entry.path().string();
    std::optional<ProcessStatus> status;
    try {
      const io::InputFile file(path, kMaxStatusBytes, io::Symlinks::refuse);
      struct stat info;
      WEFT_CHECK(::fstat(file.fd(), &info) == 0 && info.st_uid == ::geteuid(), IOError, path,
                 ": belongs to another user");
      std::string text(file.size(), '\0');
      file.read_at(text.data(), text.size(), 0);
      status = ProcessStatus::from_json(io::parse_json(text, path, 4), path);
      WEFT_CHECK(name == str(status->pid, ".json"), FormatError, path, ": holds the status of pid ", status->pid);
    } catch (const Error& e) {
      skip(str("not listed: ", e.what()));
      continue;
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
  int fd = -1;
  // Publishing is a courtesy to `weft smi`: a directory that cannot be made leaves the command
  // running unseen rather than failing it, as does one that is not private, after a warning
  // (someone may have made it to catch the writes).
  std::error_code ec;
  fs::create_directories(fs::path(directory).parent_path(), ec);
  if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) return;
  try {
    fd = open_private_directory(directory, /*repair=*/true);
  } catch (const IOError& e) {
    std::cerr << "warning: weft smi will not list this process: " << e.what() << "\n";
    return;
  }
  if (fd < 0) return;  // removed since it was made
  path_ = directory + "/" + std::to_string(status_.pid) + ".json";
  {
    const std::lock_guard<std::mutex> lock(published_mutex);
    published_directory = fd;
    published_name = std::to_string(status_.pid) + ".json";
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
  if (path_.empty()) return;
  const std::lock_guard<std::mutex> lock(published_mutex);
  ::close(published_directory);
  published_directory = -1;
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
  if (published_name.empty()) return;
  // No fsync: the file describes a running process and means nothing after a reboot. The
  // temporary's name is this process's alone; what is there (a write killed midway) goes first.
  const std::string temporary = published_name + ".tmp";
  ::unlinkat(published_directory, temporary.c_str(), 0);
  const int fd =
      ::openat(published_directory, temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (::close(fd) != 0 || !written ||
      ::renameat(published_directory, temporary.c_str(), published_directory, published_name.c_str()) != 0)
    ::unlinkat(published_directory, temporary.c_str(), 0);
}

void report_progress(int64_t count) { reported_progress = count; }

void count_progress() { ++reported_progress; }

void remove_published_status() {
  const std::lock_guard<std::mutex> lock(published_mutex);
  if (published_name.empty()) return;
  ::unlinkat(published_directory, published_name.c_str(), 0);
  published_name.clear();
}

}  // namespace weft::monitor
