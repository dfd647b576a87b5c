// Where a data set is read when no --data-dir names it: under WEFT_DATA_DIR, else Debian's root.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "weft/data/paths.h"
#include "weft/infer/metadata.h"

namespace weft::data {
namespace {

// Sets WEFT_DATA_DIR (nullopt: unsets it) for the test, and puts back what the process had.
class DataRoot {
 public:
  explicit DataRoot(const std::optional<std::string>& root) {
    if (const char* had = getenv(kDataRootVariable)) had_ = had;
    if (root)
      setenv(kDataRootVariable, root->c_str(), 1);
    else
      unsetenv(kDataRootVariable);
  }
  ~DataRoot() {
    if (had_)
      setenv(kDataRootVariable, had_->c_str(), 1);
    else
      unsetenv(kDataRootVariable);
  }

 private:
  std::optional<std::string> had_;
};

TEST(DataPaths, ADataSetIsUnderDebiansRootUnlessWeftDataDirNamesAnother) {
  {
    const DataRoot unset(std::nullopt);
    EXPECT_EQ(default_dataset_dir("fashion-mnist"), "/usr/share/datasets/fashion-mnist");
  }
  {
    const DataRoot empty("");
    EXPECT_EQ(default_dataset_dir("fashion-mnist"), "/usr/share/datasets/fashion-mnist");
  }
  const DataRoot set("/srv/data");
  EXPECT_EQ(default_dataset_dir("fashion-mnist"), "/srv/data/fashion-mnist");
}

TEST(DataPaths, TheImageTasksReadTheirDefaultDirectoryFromTheEnvironmentAtEachCall) {
  {
    const DataRoot set("/srv/data");
    EXPECT_EQ(infer::image_data_dir("fashion-mnist", ""), "/srv/data/fashion-mnist");
    EXPECT_EQ(infer::image_data_dir("fashion-mnist", "/elsewhere"), "/elsewhere");
    // No package ships MNIST, so no root holds it by default.
    EXPECT_THROW(infer::image_data_dir("mnist", ""), ValueError);
  }
  const DataRoot unset(std::nullopt);
  EXPECT_EQ(infer::image_data_dir("fashion-mnist", ""), "/usr/share/datasets/fashion-mnist");
}

}  // namespace
}  // namespace weft::data
