#include "weft/io/input_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "weft/core/error.h"

namespace weft::io {

const char* file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

uint64_t usable_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  // Unknown RAM: the allocator will say.
  uint64_t bytes = pages <= 0 || page_size <= 0 ? UINT64_MAX : static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit limit;
    if (::getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      bytes = std::min<uint64_t>(bytes, limit.rlim_cur);
  }
  return bytes;
}

InputFile::InputFile(const std::string& path, uint64_t max_bytes, Symlinks symlinks) : path_(path) {
  WEFT_CHECK(!path.empty(), IOError, "cannot open an input file with an empty name");
  // O_NONBLOCK so that opening a FIFO returns at once (to be refused below) instead of waiting
  // for a writer; it changes nothing for a regular file.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (symlinks == Symlinks::refuse ? O_NOFOLLOW : 0));
  if (fd_ < 0 && errno == ELOOP && symlinks == Symlinks::refuse)
    throw IOError(str("cannot read ", path, ": expected a regular file, found a symlink"));
  if (fd_ < 0) throw IOError(str("cannot open ", path, ": ", std::strerror(errno)));
  struct stat info;
  if (::fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    throw IOError(str("cannot read ", path, ": ", std::strerror(error)));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    throw IOError(str("cannot read ", path, ": expected a regular file, found ", file_kind(info.st_mode)));
  }
  size_ = static_cast<uint64_t>(info.st_size);
  if (size_ > max_bytes) {
    ::close(fd_);
    throw IOError(str("cannot read ", path, ": it is ", size_, " bytes, more than the ", max_bytes,
                      " bytes such a file may hold; is it the right file?"));
  }
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read_at(void* buffer, size_t n, uint64_t offset) const {
  char* out = static_cast<char*>(buffer);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw IOError(str("cannot read ", path_, ": ", std::strerror(errno)));
    if (got == 0) throw IOError(str("cannot read ", path_, ": it shrank while being read"));
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

bool is_directory(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0) return S_ISDIR(info.st_mode);
  if (errno == ENOENT || errno == ENOTDIR) return false;
  throw IOError(str("cannot open ", path, ": ", std::strerror(errno)));
}

std::string read_input(const std::string& path, uint64_t max_bytes) {
  InputFile file(path, max_bytes);
  const uint64_t memory = usable_memory_bytes();
  WEFT_CHECK(file.size() <= memory, IOError, "cannot read ", path, ": it is ", file.size(),
             " bytes, more than this machine's ", memory, " bytes of memory");
  std::string content(file.size(), '\0');
  file.read_at(content.data(), content.size(), 0);
  return content;
}

}  // namespace weft::io
