// Input files: the one way weft opens a file it reads. A path is an input only if it resolves,
// following symlinks, to a regular file: a directory, a FIFO (whose open would wait for a writer
// forever), a device such as /dev/zero (endless) or a socket is refused before anything is read,
// and so is a file larger than what the caller says it can hold, before anything is allocated.
// Every failure is an IOError naming the path and what was expected or the system's reason
// (a symlink loop, a name too long, a missing file).
//
// Sizes a file claims about itself (a header length, a tensor's byte range) are the reader's to
// check against size(); what weft allocates on the strength of a file is bounded by the file's
// size, and that by usable_memory_bytes() at most.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace weft::io {

// The memory this process may use: the machine's RAM, or less where its limits say so (ulimit -v
// and -d: RLIMIT_AS, RLIMIT_DATA). No file weft reads into memory, and nothing it allocates on the
// strength of a flag, may be larger.
uint64_t usable_memory_bytes();

// What `mode` (a stat st_mode) is, for a message: "a FIFO", "a character device", ...
const char* file_kind(unsigned mode);

enum class Symlinks { follow, refuse };

class InputFile {
 public:
  // Opens `path` for reading if it is a regular file of at most `max_bytes` bytes (a bound the
  // caller knows for its format; physical memory when the whole file will be held). With
  // Symlinks::refuse, a symlink is refused too (O_NOFOLLOW), for a directory others could write.
  InputFile(const std::string& path, uint64_t max_bytes, Symlinks symlinks = Symlinks::follow);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Exactly n bytes at `offset`; IOError when the file is shorter (it shrank) or cannot be read.
  void read_at(void* buffer, size_t n, uint64_t offset) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Whether `path`, following symlinks, is a directory (false when nothing is there or something
// else is). A path that cannot be resolved (a symlink loop, a name too long, no permission) →
// IOError naming it, where std::filesystem would throw its own filesystem_error.
bool is_directory(const std::string& path);

// The whole content of a regular file of at most max_bytes (and at most physical memory) bytes.
std::string read_input(const std::string& path, uint64_t max_bytes);

}  // namespace weft::io
