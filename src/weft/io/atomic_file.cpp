#include "weft/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <utility>

#include "weft/core/error.h"
#include "weft/io/fault.h"
#include "weft/io/input_file.h"

namespace weft::io {

namespace {

std::mutex inputs_mutex;
std::set<std::pair<dev_t, ino_t>> inputs;

// Unique per process and per call, so two threads (or two processes) saving the same path at
// once never write into one temporary.
std::string temporary_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return str(path, ".tmp.", ::getpid(), ".", counter++);
}

// A write killed before its rename leaves PATH.tmp.PID.N behind, as large as what it was writing.
// The next write of PATH removes those whose process no longer runs; a live one may be another
// process writing PATH right now. Best effort: what cannot be listed or removed stays.
void remove_dead_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string rest = name.substr(prefix.size());  // PID.N
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789.") != std::string::npos) continue;
    const long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
    if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      fs::remove(entry.path(), error);
  }
}

void sync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IOError(str("wrote ", path, " but cannot open its directory to sync it: ", std::strerror(errno)));
  int rc = should_fail("fsync", dir.string()) ? (errno = ENOSPC, -1) : ::fsync(fd);
  int error = errno;
  ::close(fd);
  // Filesystems that cannot fsync a directory say EINVAL; the rename is as durable as they allow.
  if (rc != 0 && error != EINVAL)
    throw IOError(str("wrote ", path, " but cannot sync its directory ", dir.string(), ": ", std::strerror(error)));
}

void refuse_unless_replaceable(const std::string& path) {
  if (const std::optional<std::string> why = why_not_replaceable(path)) throw IOError(str("cannot write ", path, ": ", *why));
}

}  // namespace

std::optional<std::string> why_not_writable_directory(const std::string& dir) {
  struct stat info;
  if (::stat(dir.c_str(), &info) != 0) return std::nullopt;  // nothing to protect: creating in it fails and says why
  if (!S_ISDIR(info.st_mode)) return str("is ", file_kind(info.st_mode), ", not a directory");
  if (info.st_uid != ::geteuid() && info.st_uid != 0)
    return str("the directory ", dir, " belongs to another user (uid ", info.st_uid,
               "), who could replace what is written there; write into a directory of your own");
  return std::nullopt;
}

std::optional<std::string> why_not_replaceable(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0) {
    struct stat link;
    const bool symlink = ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
    if (!S_ISREG(info.st_mode))
      return str(symlink ? "is a symlink to " : "is ", file_kind(info.st_mode), "; weft writes only regular files");
    const std::lock_guard<std::mutex> lock(inputs_mutex);
    if (inputs.contains({info.st_dev, info.st_ino}))
      return std::string("is a file this command reads; write to another path");
  } else if (errno != ENOENT) {  // a dangling symlink is ENOENT: the rename replaces the link
    return std::string(std::strerror(errno));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return why_not_writable_directory(dir.empty() ? "." : dir);
}

void mark_as_input(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return;
  const std::lock_guard<std::mutex> lock(inputs_mutex);
  inputs.insert({info.st_dev, info.st_ino});
}

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write) {
  refuse_unless_replaceable(path);
  remove_dead_temporaries(path);
  const std::string temporary = temporary_path_for(path);
  // The name is this process's: what is there was left by an earlier process with the same pid,
  // or planted by someone who guessed the name. It goes, and O_EXCL | O_NOFOLLOW make the create
  // fail rather than write through whatever appears there again.
  ::unlink(temporary.c_str());
  int fd = should_fail("create", temporary)
               ? (errno = ENOSPC, -1)
               : ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0)
    throw IOError(str("cannot write ", path, ": cannot create the temporary file ", temporary, ": ", std::strerror(errno)));
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    int error = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    throw IOError(str("cannot write ", path, ": ", std::strerror(error)));
  }

  errno = 0;
  try {
    write(file);
  } catch (const IOError& e) {
    std::fclose(file);
    ::unlink(temporary.c_str());
    throw IOError(str("cannot write ", path, ": ", e.what()));
  } catch (...) {
    std::fclose(file);
    ::unlink(temporary.c_str());
    throw;
  }

  // stdio keeps only a sticky error flag; errno still holds the failed write's reason unless a
  // later call overwrote it, and EIO stands in when nothing set it.
  int error = 0;
  if (std::ferror(file)) error = errno != 0 ? errno : EIO;
  else if (should_fail("write", temporary)) error = ENOSPC;
  else if (std::fflush(file) != 0) error = errno;
  else if (should_fail("fsync", temporary)) error = ENOSPC;
  else if (::fsync(::fileno(file)) != 0) error = errno;
  if (std::fclose(file) != 0 && error == 0) error = errno;
  if (error == 0) {
    try {
      refuse_unless_replaceable(path);  // again: the write may have taken long enough for the path to change
    } catch (const IOError&) {
      ::unlink(temporary.c_str());
      throw;
    }
  }
  if (error == 0 && should_fail("rename", path)) error = ENOSPC;
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    throw IOError(str("cannot write ", path, ": ", std::strerror(error)));
  }
  sync_directory_of(path);
}

std::string read_file(const std::string& path) { return read_input(path, UINT64_MAX); }

}  // namespace weft::io
