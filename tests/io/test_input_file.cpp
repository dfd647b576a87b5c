// Input files (io/input_file.h) and JSON from files (io/json.h): only regular files are read,
// followed through symlinks; anything else, a file larger than its bound, a path that cannot be
// resolved, is an IOError naming the path, at once (a FIFO does not block). JSON is refused when
// nested too deep, with a key twice, or with a field of the wrong type or range, as a FormatError
// that names where it came from.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft/io/atomic_file.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"

namespace weft::io {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::message_of;

void expect_refused(const std::string& path, const std::string& says) {
  for (int reader = 0; reader < 3; ++reader) {
    std::string message = message_of<IOError>([&] {
      if (reader == 0) InputFile file(path, UINT64_MAX);
      if (reader == 1) read_input(path, UINT64_MAX);
      if (reader == 2) read_file(path);
    });
    EXPECT_TRUE(contains(message, path.substr(0, 100))) << message;
    EXPECT_TRUE(contains(message, says)) << message;
  }
}

TEST(InputFile, ReadsARegularFileThroughASymlink) {
  testing::TempDir dir;
  std::ofstream(dir.file("data")) << "twelve bytes";
  fs::create_symlink("data", dir.file("link"));
  EXPECT_EQ(read_input(dir.file("link"), 12), "twelve bytes");
  InputFile file(dir.file("link"), 100);
  EXPECT_EQ(file.size(), 12u);
  char middle[5] = {};
  file.read_at(middle, 4, 4);
  EXPECT_STREQ(middle, "ve b");
  EXPECT_TRUE(contains(message_of<IOError>([&] { file.read_at(middle, 4, 10); }), "shrank"));
}

TEST(InputFile, RefusesEverythingButARegularFile) {
  testing::TempDir dir;
  expect_refused(dir.path(), "expected a regular file, found a directory");
  expect_refused("/dev/zero", "expected a regular file, found a character device");
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  expect_refused(dir.file("fifo"), "expected a regular file, found a FIFO");  // without waiting for a writer
  fs::create_symlink("loop_b", dir.file("loop_a"));
  fs::create_symlink("loop_a", dir.file("loop_b"));
  expect_refused(dir.file("loop_a"), std::strerror(ELOOP));
  expect_refused(dir.file(std::string(300, 'x')), std::strerror(ENAMETOOLONG));
  expect_refused(dir.file("missing"), std::strerror(ENOENT));
  EXPECT_THROW(InputFile("", 1), IOError);
}

TEST(InputFile, RefusesAFileLargerThanItsBoundBeforeReadingIt) {
  testing::TempDir dir;
  std::ofstream(dir.file("data")) << "twelve bytes";
  std::string message = message_of<IOError>([&] { read_input(dir.file("data"), 11); });
  EXPECT_TRUE(contains(message, "it is 12 bytes, more than the 11 bytes")) << message;
  EXPECT_GT(usable_memory_bytes(), uint64_t{1} << 20);
}

TEST(InputFile, IsDirectoryNamesAPathItCannotResolve) {
  testing::TempDir dir;
  std::ofstream(dir.file("data")) << "x";
  EXPECT_TRUE(is_directory(dir.path()));
  EXPECT_FALSE(is_directory(dir.file("data")));
  EXPECT_FALSE(is_directory(dir.file("missing")));
  EXPECT_FALSE(is_directory(dir.file("data/below")));
  fs::create_symlink("loop", dir.file("loop"));
  std::string message = message_of<IOError>([&] { is_directory(dir.file("loop")); });
  EXPECT_TRUE(contains(message, dir.file("loop")) && contains(message, std::strerror(ELOOP))) << message;
}

TEST(Json, RefusesDeepNestingDuplicateKeysAndNulBytesNamingTheSource) {
  const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  std::string message = message_of<FormatError>([&] { parse_json(deep, "f.json"); });
  EXPECT_TRUE(contains(message, "f.json nests JSON more than 64 levels deep")) << message;
  EXPECT_NO_THROW(parse_json("[[[1]]]", "f.json", 3));
  EXPECT_THROW(parse_json("[[[[1]]]]", "f.json", 3), FormatError);
  message = message_of<FormatError>([&] { parse_json(R"({"a": {"b": 1, "b": 2}})", "f.json"); });
  EXPECT_TRUE(contains(message, "f.json has the key \"b\" more than once")) << message;
  message = message_of<FormatError>([&] { parse_json(std::string("{}\0{", 4), "f.json"); });
  EXPECT_TRUE(contains(message, "NUL byte at offset 2")) << message;
  message = message_of<FormatError>([&] { parse_json("[1e999]", "f.json"); });
  EXPECT_TRUE(contains(message, "f.json is not valid JSON")) << message;
  message = message_of<FormatError>([&] { parse_json("{\"a\":", "f.json"); });
  EXPECT_TRUE(contains(message, "f.json is not valid JSON")) << message;
}

TEST(Json, FieldsAreReadWithTheirTypeAndRange) {
  const nlohmann::json j = nlohmann::json::parse(
      R"({"n": 7, "big": 18446744073709551615, "neg": -3, "f": 2.5, "s": "7", "huge": 1e300, "b": true})");
  EXPECT_EQ(json_integer(j, "n", "w", 0, 10), 7);
  EXPECT_EQ(json_integer(j, "neg", "w"), -3);
  EXPECT_EQ(json_number(j, "f", "w", 0, 3), 2.5);
  EXPECT_EQ(json_number(j, "n", "w"), 7.0);
  EXPECT_EQ(json_string(j, "s", "w"), "7");
  struct Bad {
    const char* key;
    const char* says;
  };
  for (const Bad& bad : {Bad{"big", "\"big\" must be an integer in"}, Bad{"neg", "found -3"}, Bad{"f", "found 2.5"},
                         Bad{"s", "found \"7\""}, Bad{"b", "found true"}, Bad{"missing", "no \"missing\""}}) {
    std::string message = message_of<FormatError>([&] { json_integer(j, bad.key, "trainer.json", 0); });
    EXPECT_TRUE(contains(message, "trainer.json: ") && contains(message, bad.says)) << message;
  }
  EXPECT_TRUE(contains(message_of<FormatError>([&] { json_integer(j, "n", "w", 8); }), "in [8, "));
  EXPECT_TRUE(contains(message_of<FormatError>([&] { json_number(j, "huge", "w", 0, 1e9); }), "found 1e+300"));
  EXPECT_TRUE(contains(message_of<FormatError>([&] { json_string(j, "n", "w"); }), "must be a string, found 7"));
  EXPECT_THROW(json_field(nlohmann::json::array(), "n", "w"), FormatError);
}

TEST(Json, DecimalIntegersAreDigitsOnlyAndInRange) {
  EXPECT_EQ(decimal_integer("18446744073709551615", "w"), UINT64_MAX);
  EXPECT_EQ(decimal_integer("40", "w", 40), 40u);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1e3", "0x10", "18446744073709551616", "41", "nan"})
    EXPECT_TRUE(contains(message_of<FormatError>([&] { decimal_integer(bad, "m: weft.step", 40); }),
                         "m: weft.step: expected a decimal integer in [0, 40]"))
        << bad;
}

}  // namespace
}  // namespace weft::io
