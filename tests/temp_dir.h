// A fresh directory under the system's temporary directory, removed with everything in it when
// the object goes out of scope, for tests that write files.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace weft::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "weft_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace weft::testing
