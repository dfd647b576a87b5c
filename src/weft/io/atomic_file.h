// Atomic file replacement: a file written through write_file_atomic is, after a crash or an
// error at any point, either its old complete content (or absent, if it did not exist) or the
// new complete content, never a mixture or a truncated prefix.
//
// The bytes go to a temporary file beside the target (same directory, so the same filesystem,
// which rename needs), are flushed and fsync'd, and the temporary is renamed over the target;
// the directory is then fsync'd so the rename itself survives a power loss. Readers that had the
// old file open or mmap'd keep seeing the old bytes, because rename gives the path a new inode
// instead of rewriting the old one: this is what lets a server keep serving a checkpoint while
// training overwrites it.
//
// A write killed before its rename leaves PATH.tmp.PID.N; the next write of PATH removes those of
// processes that no longer run.
//
// Failures throw weft::IOError naming the path and the system's reason (strerror), after
// removing the temporary file.
#pragma once
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>

namespace weft::io {

// `write` emits the whole content with stdio calls on the file it is given; a write error it
// leaves in the stream (fwrite's short count, ferror) is detected afterwards, so it need not check
// each call. Anything `write` throws is rethrown after cleanup (IOError gains the target's path).
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write);

// The whole content of a file: io::read_input (input_file.h) bounded by physical memory alone.
// Not a regular file, too large, or unreadable → IOError.
std::string read_file(const std::string& path);

}  // namespace weft::io
