#include "weft/io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "weft/core/error.h"

namespace weft::io {

namespace {

// What the holder wrote into the lock file, at most a line.
std::string holder_of(int fd) {
  char buffer[256] = {};
  const ssize_t n = pread(fd, buffer, sizeof buffer - 1, 0);
  std::string text(buffer, n > 0 ? static_cast<size_t>(n) : 0);
  if (const size_t end = text.find('\n'); end != std::string::npos) text.resize(end);
  return text.empty() ? "another process" : text;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& activity) {
  const std::string path = (std::filesystem::path(dir) / kFileName).string();
  // The lock file is truncated and written: a symlink planted there (to any file) is not
  // followed, and anything but a regular file (a FIFO, a device) is refused before a write.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd_ < 0 && errno == ELOOP) throw IOError(str("cannot lock ", dir, ": ", path, " is a symlink"));
  if (fd_ < 0) throw IOError(str("cannot create the lock file ", path, ": ", std::strerror(errno)));
  struct stat info;
  if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw IOError(str("cannot lock ", dir, ": ", path, " is not a regular file"));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? holder_of(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (error != EWOULDBLOCK) throw IOError(str("cannot lock ", path, ": ", std::strerror(error)));
    throw ValueError(str(dir, " is in use by ", holder, ": one run writes a directory at a time; wait for it to end ",
                         "or choose another directory"));
  }
  const std::string line = str("process ", ::getpid(), " (", activity, ")\n");
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw IOError(str("cannot write the lock file ", path, ": ", std::strerror(error)));
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace weft::io
