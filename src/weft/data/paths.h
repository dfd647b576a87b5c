// Where weft looks for a data set that no --data-dir names: DIR/NAME, where DIR is the
// WEFT_DATA_DIR environment variable when set and not empty, else /usr/share/datasets, where
// Debian's dataset-* packages install theirs (dataset-fashion-mnist: /usr/share/datasets/fashion-mnist).
#pragma once
#include <string>

namespace weft::data {

inline constexpr const char* kDataRootVariable = "WEFT_DATA_DIR";
inline constexpr const char* kPackagedDataRoot = "/usr/share/datasets";

// `name`'s default directory, read from the environment on every call.
std::string default_dataset_dir(const std::string& name);

}  // namespace weft::data
