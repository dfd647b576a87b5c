#include "weft/data/paths.h"

#include <cstdlib>
#include <filesystem>

namespace weft::data {

std::string default_dataset_dir(const std::string& name) {
  const char* root = std::getenv(kDataRootVariable);
  return (std::filesystem::path(root && *root ? root : kPackagedDataRoot) / name).string();
}

}  // namespace weft::data
