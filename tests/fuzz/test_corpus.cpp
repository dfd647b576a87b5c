// The fuzz corpus replayed: every file of tests/fuzz/corpus/<target>/ goes through the same
// function libFuzzer drives (fuzz/targets.h), and must be accepted or refused with a weft::Error;
// any other exception fails here, and a crash or a sanitizer report fails the sanitizer build.
// The valid-* files, made by weft's own writers, must be accepted, and the bad-* files, made
// invalid by hand, refused; the files libFuzzer found (named by their hash) may go either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "targets.h"
#include "weft/core/error.h"

namespace weft::fuzz {
namespace {

namespace fs = std::filesystem;


std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FuzzCorpus : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzCorpus, EveryFileIsAcceptedOrRefusedWithAWeftError) {
  const Target& target = GetParam();
  const fs::path dir = fs::path(WEFT_FUZZ_CORPUS_DIR) / target.name;
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  int valid = 0;
  for (const fs::path& file : files) {
    const std::string name = str(target.name, "/", file.filename().string());
    SCOPED_TRACE(name);
    bool accepted = false;
    try {
      accepted = target.run(slurp(file));
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << " escaped as " << typeid(e).name() << ": " << e.what();
    }
    if (file.filename().string().starts_with("valid-")) {
      EXPECT_TRUE(accepted) << name << " is a valid file, but the reader refused it";
      ++valid;
    }
    if (file.filename().string().starts_with("bad-")) {
      EXPECT_FALSE(accepted) << name << " was made invalid, but the reader accepted it";
    }
  }
  EXPECT_GE(files.size(), 5u) << dir << " lost its corpus";
  EXPECT_GE(valid, 1) << dir << " has no valid-* seed";
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace weft::fuzz
