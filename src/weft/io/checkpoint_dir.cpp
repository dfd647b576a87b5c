#include "weft/io/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "weft/core/error.h"
#include "weft/io/fault.h"

namespace weft::io {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPointer = "latest";
constexpr const char* kTemporary = ".tmp-";

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

void fail(const std::string& what, const std::string& path, int error) {
  throw IOError(str("cannot save the checkpoint: ", what, " ", path, ": ", std::strerror(error)));
}

// fsync of a file or a directory. Filesystems that cannot sync a directory say EINVAL; the
// rename is then as durable as they allow.
void sync(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path, errno);
  int rc = should_fail("fsync", path) ? (errno = ENOSPC, -1) : ::fsync(fd);
  int error = errno;
  ::close(fd);
  if (rc != 0 && !(directory && error == EINVAL)) fail("cannot sync", path, error);
}

void rename_over(const std::string& from, const std::string& to) {
  if (should_fail("rename", to)) fail("cannot rename " + from + " to", to, ENOSPC);
  if (::rename(from.c_str(), to.c_str()) != 0) fail("cannot rename " + from + " to", to, errno);
}

// Points `path` at `target` with one rename, so that readers see the old link or the new one.
void replace_with_symlink(const std::string& path, const std::string& target) {
  const fs::path temporary = fs::path(path).parent_path() / (kTemporary + fs::path(path).filename().string());
  std::error_code error;
  fs::remove(temporary, error);
  if (should_fail("symlink", temporary.string())) fail("cannot create", temporary.string(), ENOSPC);
  if (::symlink(target.c_str(), temporary.c_str()) != 0) fail("cannot create", temporary.string(), errno);
  rename_over(temporary.string(), path);
  sync(fs::path(path).parent_path().string(), /*directory=*/true);
}

// A temporary write_file_atomic leaves when killed: NAME.tmp.PID.N.
bool is_atomic_file_temporary(const std::string& name) {
  const size_t tmp = name.rfind(".tmp.");
  if (tmp == std::string::npos) return false;
  const std::string rest = name.substr(tmp + 5);  // PID.N
  const size_t dot = rest.find('.');
  auto digits = [](const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; };
  return dot != std::string::npos && digits(rest.substr(0, dot)) && digits(rest.substr(dot + 1));
}

// Removes what earlier saves left in DIR; keeps the step directory `current` ("" when none).
// Best effort: what cannot be removed now is tried again at the next save.
void remove_leftovers(const std::string& dir, const std::string& current) {
  std::error_code error;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool step_directory = name.rfind("step-", 0) == 0 && entry.is_directory(error) && !entry.is_symlink(error);
    const bool dangling_link = entry.is_symlink(error) && !fs::exists(entry.path(), error) &&
                               fs::read_symlink(entry.path(), error).string().rfind(kPointer, 0) == 0;
    if (name.rfind(kTemporary, 0) == 0 || is_atomic_file_temporary(name) || (step_directory && name != current) ||
        dangling_link)
      stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) fs::remove_all(path, error);
}

std::string current_name(const std::string& dir) {
  const std::string current = current_checkpoint(dir);
  return current == dir ? "" : fs::path(current).filename().string();
}

}  // namespace

std::string staging_directory(const std::string& dir, int64_t step) {
  return (fs::path(dir) / (kTemporary + step_name(step))).string();
}

CheckpointWriter::CheckpointWriter(std::string dir, int64_t step)
    : dir_(std::move(dir)),
      staging_(staging_directory(dir_, step)),
      name_(step_name(step)) {
  std::error_code error;
  fs::create_directories(dir_, error);
  if (error) throw IOError(str("cannot create checkpoint directory ", dir_, ": ", error.message()));
  remove_leftovers(dir_, current_name(dir_));
  if (should_fail("mkdir", staging_)) fail("cannot create", staging_, ENOSPC);
  if (::mkdir(staging_.c_str(), 0777) != 0) fail("cannot create", staging_, errno);
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  std::error_code error;
  fs::remove_all(staging_, error);
}

std::string CheckpointWriter::commit() {
  std::error_code error;
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(staging_, error))
    if (entry.is_regular_file()) files.push_back(entry.path().filename().string());
  if (error) fail("cannot list", staging_, error.value());
  for (const std::string& file : files) sync((fs::path(staging_) / file).string(), /*directory=*/false);
  sync(staging_, /*directory=*/true);

  // Saving the step that is already current (a run resumed and saved at once) needs a new name:
  // a directory cannot be renamed over a non-empty one, and the current one must stay until the
  // pointer moves.
  std::string name = name_;
  for (int n = 2; fs::exists(fs::path(dir_) / name, error); ++n) name = str(name_, "-", n);
  const std::string step_dir = (fs::path(dir_) / name).string();
  rename_over(staging_, step_dir);
  committed_ = true;
  sync(dir_, /*directory=*/true);

  // The pointer, then the links through it: a link is replaced only to repair it (an older
  // layout's file, or a link made by hand), as a correct one already follows the pointer.
  replace_with_symlink((fs::path(dir_) / kPointer).string(), name);
  for (const std::string& file : files) {
    const fs::path link = fs::path(dir_) / file, target = fs::path(kPointer) / file;
    if (fs::read_symlink(link, error) != target) replace_with_symlink(link.string(), target.string());
  }
  remove_leftovers(dir_, name);
  return step_dir;
}

std::string current_checkpoint(const std::string& dir) {
  const fs::path pointer = fs::path(dir) / kPointer;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(pointer, error);
  if (status.type() == fs::file_type::not_found) return dir;
  WEFT_CHECK(status.type() == fs::file_type::symlink, FormatError, pointer.string(),
             " should be a symlink to a step directory, but is not one; was it replaced by hand?");
  const std::string name = fs::read_symlink(pointer, error).string();
  WEFT_CHECK(name.rfind("step-", 0) == 0 && name.find('/') == std::string::npos, FormatError, pointer.string(),
             " should point to a step directory (step-NNNNNNNN), but points to '", name.substr(0, 64),
             "'; point it to one of DIR's step directories to resume from that one");
  const fs::path step = fs::path(dir) / name;
  if (!fs::is_directory(step, error))
    throw IOError(str(pointer.string(), " points to ", name, ", but ", step.string(),
                      " is not a directory; was it removed by hand?"));
  return step.string();
}

}  // namespace weft::io
