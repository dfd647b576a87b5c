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
// Only a regular file is ever replaced: the destination is checked before the temporary is
// created and again just before the rename (why_not_replaceable), so a device node, a FIFO, a
// socket, a directory, a symlink to one of those, a directory of another user's, or a file this
// command reads is refused before a byte is written. The temporary is created with O_EXCL and
// O_NOFOLLOW: a symlink planted at its name is never followed.
//
// Failures throw weft::IOError naming the path and the system's reason (strerror), after
// removing the temporary file.
#pragma once
#include <cstddef>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace weft::io {

// `write` emits the whole content with stdio calls on the file it is given; a write error it
// leaves in the stream (fwrite's short count, ferror) is detected afterwards, so it need not check
// each call. Anything `write` throws is rethrown after cleanup (IOError gains the target's path).
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write);

// Why write_file_atomic will not put a file at `path`, or nullopt when it may: something other
// than a regular file is there (following symlinks: a symlink to a regular file is replaced by
// the new file, its target untouched), the file is one mark_as_input named (the same file by
// device and inode, whatever its name), or its directory is not one this process may write into
// (why_not_writable_directory).
std::optional<std::string> why_not_replaceable(const std::string& path);

// Why `dir` is not a directory this process writes into, or nullopt: it must be a directory (a
// symlink to one is followed) owned by this process's effective user or by root. Another user
// could swap the names in a directory of theirs while a file is written there. A path that
// cannot be resolved is left to the write that follows, which fails naming the reason.
std::optional<std::string> why_not_writable_directory(const std::string& dir);

// Marks the file at `path` (following symlinks) as an input of this command, which
// write_file_atomic then refuses to replace, for the rest of the process. Nothing there: no-op.
void mark_as_input(const std::string& path);

// The whole content of a file: io::read_input (input_file.h) bounded by physical memory alone.
// Not a regular file, too large, or unreadable → IOError.
std::string read_file(const std::string& path);

}  // namespace weft::io
