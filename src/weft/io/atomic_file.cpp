#include "weft/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "weft/core/error.h"
#include "weft/io/fault.h"
#include "weft/io/input_file.h"

namespace weft::io {

namespace {

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

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write) {
  remove_dead_temporaries(path);
  const std::string temporary = temporary_path_for(path);
  int fd = should_fail("create", temporary) ? (errno = ENOSPC, -1)
                                            : ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
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
