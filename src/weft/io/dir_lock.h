// DirectoryLock: one writer per output directory. Two runs writing the same directory would
// interleave their logs and overwrite each other's checkpoints, each believing it succeeded, so
// the second is refused up front, with the process that holds the directory named.
//
// The lock is flock(2) on DIR/.weft.lock, held for the lock object's lifetime. The kernel drops
// it when the holder's file is closed, which includes the holder being killed (kill -9, a crash),
// so a dead run never leaves the directory stuck: the file stays, the lock does not. While held,
// the file says who holds it (pid and what it is doing), which is what a refused run reports.
// flock is per open file, so a second lock on the same directory conflicts within one process
// too. Linux's flock works on local filesystems; on NFS it is emulated with fcntl locks.
#pragma once
#include <string>

namespace weft::io {

class DirectoryLock {
 public:
  // Locks `dir` (which must exist) for `activity` ("weft train"); another holder → ValueError
  // naming its pid and activity; a lock file that cannot be created or locked → IOError.
  DirectoryLock(const std::string& dir, const std::string& activity);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  static constexpr const char* kFileName = ".weft.lock";

 private:
  int fd_ = -1;
};

}  // namespace weft::io
