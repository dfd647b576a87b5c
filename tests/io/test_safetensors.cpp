// safetensors checkpoints: bit-exact round trips, the byte layout the format prescribes, zero-copy
// loading from a private mapping, atomic replacement, and one test per malformed-file rule.
#include "expect_error.h"
#include "foreign_safetensors.h"
#include "weft/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/io/atomic_file.h"

namespace weft::io {
namespace {

namespace fs = std::filesystem;
using weft::testing::contains;
using weft::testing::message_of;

// The u64 little-endian header length that opens every safetensors file.
std::string le64(uint64_t n) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return bytes;
}

std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous_untracked();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// Which file, if any, is mapped at address p in this process (from /proc/self/maps).
std::string mapped_file_at(const void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, file;
    fields >> range >> perms >> offset >> device >> inode;
    std::getline(fields >> std::ws, file);
    uintptr_t begin = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    uintptr_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (address >= begin && address < end) return file;
  }
  return "";
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() / ("weft_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> files_in_dir() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  void write_raw(const std::string& file, const std::string& bytes) const {
    std::ofstream(path(file), std::ios::binary) << bytes;
  }
  // A file with `header` as its JSON (padded to 8 like a real writer would) and `data` after it.
  std::string write_with_header(const std::string& header, const std::string& data) const {
    std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
    write_raw("bad.safetensors", le64(padded.size()) + padded + data);
    return path("bad.safetensors");
  }
  // Loading and header reading both refuse the file with a one-line message naming it and `part`.
  void expect_format_error(const std::string& file, const std::string& part) const {
    for (bool header_only : {false, true}) {
      std::string message = message_of<FormatError>([&] {
        if (header_only) read_safetensors_header(file);
        else load_safetensors(file);
      });
      EXPECT_TRUE(contains(message, file)) << message;
      EXPECT_TRUE(contains(message, part)) << message;
      EXPECT_FALSE(contains(message, "\n")) << message;
    }
  }

  fs::path dir_;
};

// Raw bytes with a pattern that hits NaN payloads, subnormals and signs in the float formats.
Tensor patterned(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i)
    bytes[i] = dtype == DType::boolean ? (i + seed) % 3 == 0 : static_cast<unsigned char>(i * 37 + 11 * seed);
  return t;
}

TEST_F(SafetensorsTest, RoundTripsEveryDTypeBitForBit) {
  const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64,
                          DType::i32, DType::i8,  DType::u8,  DType::boolean};
  const Shape shapes[] = {{2, 3}, {}, {0}, {3, 0, 2}, {5}, {1, 1, 7}};
  std::vector<std::pair<std::string, Tensor>> tensors;
  int seed = 0;
  for (DType dtype : dtypes)
    for (const Shape& shape : shapes)
      tensors.emplace_back(str(dtype_name(dtype), shape_str(shape)), patterned(shape, dtype, ++seed));
  save_safetensors(path("all.safetensors"), tensors);

  SafetensorsFile loaded = load_safetensors(path("all.safetensors"));
  const std::string canonical = fs::canonical(path("all.safetensors")).string();
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  EXPECT_EQ(loaded.metadata.size(), 1u) << "weft.checksum alone";
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, expected] = tensors[i];
    const auto& [loaded_name, actual] = loaded.tensors[i];
    EXPECT_EQ(loaded_name, name);
    EXPECT_EQ(actual.dtype(), expected.dtype()) << name;
    EXPECT_EQ(actual.shape(), expected.shape()) << name;
    EXPECT_EQ(actual.strides(), contiguous_strides(expected.shape())) << name;
    EXPECT_EQ(bytes_of(actual), bytes_of(expected)) << name;
    // weft lays the data out so that every tensor is aligned, hence loaded in place.
    if (actual.numel() > 0) {
      EXPECT_EQ(mapped_file_at(actual.data_ptr()), canonical) << name;
    }
  }
}

TEST_F(SafetensorsTest, MetadataRoundTripsBesideTheChecksum) {
  std::map<std::string, std::string> metadata{{"format", "pt"}, {"weft.step", "12"}, {"note", "h\u00e9llo \"q\"\n"}};
  const std::string checksum = save_safetensors(path("m.safetensors"), {{"x", Tensor::ones({2})}}, metadata);
  EXPECT_TRUE(checksum.starts_with("xxh3-64:") && checksum.size() == 24) << checksum;
  metadata[kChecksumKey] = checksum;
  EXPECT_EQ(load_safetensors(path("m.safetensors")).metadata, metadata);

  // A checksum passed in (metadata copied from a loaded file) is replaced by the one of what is written.
  save_safetensors(path("copy.safetensors"), {{"x", Tensor::zeros({2})}}, metadata);
  EXPECT_NE(load_safetensors(path("copy.safetensors")).metadata.at(kChecksumKey), checksum);
}

TEST_F(SafetensorsTest, NonContiguousTensorsAreWrittenAsTheirRowMajorValues) {
  Tensor base = Tensor::arange(12).view({3, 4});
  Tensor transposed = base.t();          // strides (1, 4)
  Tensor window = base.narrow(1, 1, 2);  // offset 1, rows not adjacent
  save_safetensors(path("views.safetensors"), {{"t", transposed}, {"w", window}});

  SafetensorsFile loaded = load_safetensors(path("views.safetensors"));
  EXPECT_EQ(loaded.tensors[0].second.shape(), (Shape{4, 3}));
  EXPECT_EQ(loaded.tensors[0].second.to_vector<float>(), transposed.to_vector<float>());
  EXPECT_EQ(loaded.tensors[1].second.shape(), (Shape{3, 2}));
  EXPECT_EQ(loaded.tensors[1].second.to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
}

TEST_F(SafetensorsTest, TinyFileHasTheExactBytesTheFormatPrescribes) {
  save_safetensors(path("tiny.safetensors"),
                   {{"b", Tensor::from_vector<uint8_t>({7, 8, 9}, {3})},
                    {"w", Tensor::from_vector<float>({1.0f, 2.0f}, {2})}},
                   {{"format", "pt"}});
  // 181 bytes of JSON, metadata first (its keys sorted) and the tensors in the given order, then 3
  // spaces so that 8 + 184 is a multiple of 8. The data puts the 4-byte elements first, so w's 8
  // bytes then b's 3. The checksum is pinned: files saved today must verify tomorrow.
  const std::string json =
      R"({"__metadata__":{"format":"pt","weft.checksum":"xxh3-64:712ae5bd065c137f"},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]},)"
      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(json.size(), 181u);
  std::string expected = std::string("\xb8\0\0\0\0\0\0\0", 8) + json + std::string(3, ' ') +
                         std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8) +  // 1.0f, 2.0f little-endian
                         std::string("\x07\x08\x09", 3);
  std::string actual = read_file(path("tiny.safetensors"));
  ASSERT_EQ(actual.size(), 203u);
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(static_cast<int>(static_cast<unsigned char>(actual[i])), static_cast<int>(static_cast<unsigned char>(expected[i])))
        << "byte " << i;
}

TEST_F(SafetensorsTest, EmptyCheckpointIsJustItsChecksum) {
  save_safetensors(path("empty.safetensors"), {});
  EXPECT_EQ(read_file(path("empty.safetensors")),
            le64(64) + R"({"__metadata__":{"weft.checksum":"xxh3-64:412f1275e10017f3"}})" + std::string(3, ' '));
  EXPECT_TRUE(load_safetensors(path("empty.safetensors")).tensors.empty());
}

// ---- checksums

// Any byte of the data, a tensor's dtype (I32 and F32 have the same size) or a metadata value
// changed after the save: refused naming the file. Without the checksum (another writer's file,
// or weft's before it wrote one) the same file loads unchecked.
TEST_F(SafetensorsTest, ChecksumRefusesAFileChangedAfterItWasSaved) {
  const std::vector<std::pair<std::string, Tensor>> tensors = {{"w", Tensor::arange(256).view({16, 16})},
                                                               {"ids", Tensor::arange(8, DType::i64)}};
  auto fresh = [&](const std::string& name) {
    save_safetensors(path(name), tensors, {{"weft.step", "3"}});
    return path(name);
  };
  auto expect_refused = [&](const std::string& file) {
    const std::string message = message_of<FormatError>([&] { load_safetensors(file); });
    EXPECT_TRUE(contains(message, file + ": its bytes do not match the checksum weft wrote with them")) << message;
  };
  for (int64_t from_end : {int64_t{1}, int64_t{64}, int64_t{8 * 8 + 256 * 4}}) {  // the last, a middle and the first data byte
    const std::string file = fresh(str("flip", from_end, ".safetensors"));
    testing::flip_byte_from_end(file, from_end);
    expect_refused(file);
  }
  const std::string retyped = fresh("retyped.safetensors");
  testing::edit_safetensors_header(retyped, [](nlohmann::ordered_json& h) { h["w"]["dtype"] = "I32"; });
  expect_refused(retyped);
  const std::string restepped = fresh("restepped.safetensors");
  testing::edit_safetensors_header(restepped, [](nlohmann::ordered_json& h) { h["__metadata__"]["weft.step"] = "4"; });
  expect_refused(restepped);

  const std::string unchecked = fresh("unchecked.safetensors");
  testing::edit_safetensors_header(unchecked, [](nlohmann::ordered_json& h) { h["__metadata__"].erase(kChecksumKey); });
  testing::flip_byte_from_end(unchecked, 1);
  EXPECT_EQ(load_safetensors(unchecked).tensors.size(), 2u);

  const std::string newer = fresh("newer.safetensors");
  testing::edit_safetensors_header(newer, [](nlohmann::ordered_json& h) { h["__metadata__"][kChecksumKey] = "sha3:00"; });
  const std::string message = message_of<FormatError>([&] { load_safetensors(newer); });
  EXPECT_TRUE(contains(message, "weft.checksum is \"sha3:00\"; weft checks \"xxh3-64:...\"")) << message;
}

TEST_F(SafetensorsTest, LoadedTensorsBorrowTheMappingAndKeepItAlive) {
  Tensor original = Tensor::arange(1000);
  save_safetensors(path("big.safetensors"), {{"a", original}, {"b", Tensor::ones({3}, DType::f64)}});
  const std::string canonical = fs::canonical(path("big.safetensors")).string();

  Tensor held;
  const void* address;
  {
    SafetensorsFile loaded = load_safetensors(path("big.safetensors"));
    held = loaded.tensors[0].second;
    address = held.data_ptr();
    EXPECT_EQ(mapped_file_at(address), canonical);
    EXPECT_EQ(mapped_file_at(loaded.tensors[1].second.data_ptr()), canonical);
    EXPECT_EQ(held.storage().nbytes(), held.nbytes());
  }
  EXPECT_EQ(mapped_file_at(address), canonical);  // the struct is gone, the mapping is not
  EXPECT_EQ(held.to_vector<float>(), original.to_vector<float>());
  held = Tensor();
  EXPECT_EQ(mapped_file_at(address), "");  // the last tensor unmapped it
}

TEST_F(SafetensorsTest, WritingToALoadedTensorLeavesTheFileUnchanged) {
  save_safetensors(path("w.safetensors"), {{"a", Tensor::arange(8)}});
  const std::string before = read_file(path("w.safetensors"));
  {
    SafetensorsFile loaded = load_safetensors(path("w.safetensors"));
    loaded.tensors[0].second.fill_(7);
    EXPECT_EQ(loaded.tensors[0].second.at({3}), 7);
  }
  EXPECT_EQ(read_file(path("w.safetensors")), before);
  EXPECT_EQ(load_safetensors(path("w.safetensors")).tensors[0].second.at({3}), 3);
}

TEST_F(SafetensorsTest, MisalignedTensorFromAnotherWriterIsCopied) {
  // A U8 tensor of one byte puts the F32 tensor after it at data offset 1: legal, unaligned.
  std::string data = "\x05" + std::string("\x00\x00\x80\x3f\x00\x00\x40\x40", 8);
  std::string file = write_with_header(
      R"({"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})",
      data);
  SafetensorsFile loaded = load_safetensors(file);
  ASSERT_EQ(loaded.tensors.size(), 2u);
  EXPECT_EQ(loaded.tensors[0].first, "u");
  const Tensor& f = loaded.tensors[1].second;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data_ptr()) % 4, 0u);
  // Copied into memory ("" or "[heap]", by where the allocator put it), not borrowed from the file.
  EXPECT_FALSE(mapped_file_at(f.data_ptr()).starts_with("/")) << mapped_file_at(f.data_ptr());
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.0f, 3.0f}));
  EXPECT_EQ(loaded.tensors[0].second.at({0}), 5);
}

TEST_F(SafetensorsTest, TensorsComeInHeaderOrderWhateverTheDataOrder) {
  std::string file = write_with_header(
      R"({"second":{"dtype":"I8","shape":[2],"data_offsets":[2,4]},"first":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})",
      "\x01\x02\x03\x04");
  SafetensorsFile loaded = load_safetensors(file);
  EXPECT_EQ(loaded.tensors[0].first, "second");
  EXPECT_EQ(loaded.tensors[0].second.to_vector<int>(), (std::vector<int>{3, 4}));
  EXPECT_EQ(loaded.tensors[1].second.to_vector<int>(), (std::vector<int>{1, 2}));
}

TEST_F(SafetensorsTest, ReadHeaderListsTensorsWithoutLoadingThem) {
  save_safetensors(path("h.safetensors"), {{"w", Tensor::zeros({2, 3}, DType::bf16)}, {"s", Tensor::scalar(1, DType::i64)}},
                   {{"format", "pt"}});
  SafetensorsHeader header = read_safetensors_header(path("h.safetensors"));
  ASSERT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.tensors[0].name, "w");
  EXPECT_EQ(header.tensors[0].dtype, DType::bf16);
  EXPECT_EQ(header.tensors[0].shape, (Shape{2, 3}));
  EXPECT_EQ(header.tensors[0].begin, 8u);  // the i64 goes first in the data, for alignment
  EXPECT_EQ(header.tensors[0].end, 20u);
  EXPECT_EQ(header.tensors[1].shape, Shape{});
  EXPECT_EQ(header.tensors[1].begin, 0u);
  EXPECT_EQ(header.tensors[1].end, 8u);
  EXPECT_EQ(header.metadata.at("format"), "pt");
  EXPECT_EQ(header.data_start % 8, 0u);
  EXPECT_EQ(header.data_start + 20, fs::file_size(path("h.safetensors")));
}

// ---- atomic writes

TEST_F(SafetensorsTest, SavingOverAnExistingFileReplacesItWithoutTemporaries) {
  save_safetensors(path("model.safetensors"), {{"a", Tensor::full({4}, 1)}});
  SafetensorsFile old_load = load_safetensors(path("model.safetensors"));
  save_safetensors(path("model.safetensors"), {{"b", Tensor::full({2}, 2)}});

  SafetensorsFile fresh = load_safetensors(path("model.safetensors"));
  ASSERT_EQ(fresh.tensors.size(), 1u);
  EXPECT_EQ(fresh.tensors[0].first, "b");
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"model.safetensors"});
  // The old file was replaced by rename, not rewritten, so its mapping still shows the old values.
  EXPECT_EQ(old_load.tensors[0].second.to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
}

TEST_F(SafetensorsTest, SavingIntoAMissingDirectoryIsAnIOErrorNamingThePath) {
  std::string target = path("no/such/dir/model.safetensors");
  std::string message = message_of<IOError>([&] { save_safetensors(target, {{"a", Tensor::ones({2})}}); });
  EXPECT_TRUE(contains(message, target)) << message;
  EXPECT_TRUE(contains(message, std::strerror(ENOENT))) << message;
  EXPECT_TRUE(files_in_dir().empty());
}

TEST_F(SafetensorsTest, AWriteThatFailsHalfwayLeavesTheOldFileAndNoTemporary) {
  write_raw("state.json", "old content");
  EXPECT_THROW(write_file_atomic(path("state.json"),
                                 [](std::FILE* f) {
                                   std::fputs("new, half written", f);
                                   throw ValueError("serialisation failed");
                                 }),
               ValueError);
  EXPECT_EQ(read_file(path("state.json")), "old content");
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"state.json"});

  std::string message = message_of<IOError>([&] {
    write_file_atomic(path("state.json"), [](std::FILE*) { throw IOError("disk full"); });
  });
  EXPECT_TRUE(contains(message, path("state.json"))) << message;
  EXPECT_TRUE(contains(message, "disk full")) << message;
  EXPECT_EQ(read_file(path("state.json")), "old content");
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"state.json"});
}

TEST_F(SafetensorsTest, WriteFileAtomicCreatesAndReplaces) {
  write_file_atomic(path("f.txt"), [](std::FILE* f) { std::fputs("one", f); });
  EXPECT_EQ(read_file(path("f.txt")), "one");
  write_file_atomic(path("f.txt"), [](std::FILE* f) { std::fputs("two!", f); });
  EXPECT_EQ(read_file(path("f.txt")), "two!");
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"f.txt"});
}

TEST_F(SafetensorsTest, MissingFilesAreIOErrors) {
  std::string missing = path("missing.safetensors");
  for (auto call : {+[](const std::string& p) { load_safetensors(p); }, +[](const std::string& p) { read_safetensors_header(p); },
                    +[](const std::string& p) { read_file(p); }}) {
    std::string message = message_of<IOError>([&] { call(missing); });
    EXPECT_TRUE(contains(message, missing)) << message;
    EXPECT_TRUE(contains(message, std::strerror(ENOENT))) << message;
  }
  EXPECT_TRUE(contains(message_of<IOError>([&] { load_safetensors(dir_.string()); }),
                       "expected a regular file, found a directory"));
}

// ---- what the writer refuses

TEST_F(SafetensorsTest, SaveRefusesDuplicateEmptyOrReservedNames) {
  Tensor t = Tensor::ones({2});
  EXPECT_TRUE(contains(message_of<ValueError>([&] { save_safetensors(path("x.safetensors"), {{"a", t}, {"a", t}}); }),
                       "\"a\""));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { save_safetensors(path("x.safetensors"), {{"", t}}); }),
                       "empty name"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { save_safetensors(path("x.safetensors"), {{"__metadata__", t}}); }),
                       "reserved"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { save_safetensors(path("x.safetensors"), {{"bad\xff", t}}); }),
                       "valid UTF-8"));
  EXPECT_TRUE(files_in_dir().empty());
}

// ---- malformed files: each rule has its own file

TEST_F(SafetensorsTest, RejectsAFileShorterThanTheLengthPrefix) {
  write_raw("short.safetensors", std::string("\x10\0\0\0\0", 5));
  expect_format_error(path("short.safetensors"), "too short");
}

TEST_F(SafetensorsTest, RejectsAHeaderLengthPastTheEndOfTheFile) {
  write_raw("t.safetensors", le64(1000) + "{}");
  expect_format_error(path("t.safetensors"), "header length 1000 runs past the end of the file (10 bytes)");
}

TEST_F(SafetensorsTest, RejectsAnAbsurdHeaderLength) {
  write_raw("t.safetensors", le64(uint64_t{1} << 62) + "{}");
  expect_format_error(path("t.safetensors"), "exceeds the 100000000-byte limit");
}

TEST_F(SafetensorsTest, RejectsAHeaderThatIsNotJson) {
  expect_format_error(write_with_header(R"({"a": {"dtype": )", ""), "header is not valid JSON");
}

TEST_F(SafetensorsTest, RejectsAHeaderThatIsNotAnObject) {
  expect_format_error(write_with_header("[1, 2]", ""), "not a JSON object");
  expect_format_error(write_with_header(" {}", ""), "not a JSON object");  // the format requires '{' first
}

TEST_F(SafetensorsTest, RejectsANulByteInTheHeader) {
  // nlohmann's lexer would stop at the NUL and accept the object before it.
  expect_format_error(write_with_header(std::string(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})") +
                                            std::string("\0junk", 5),
                                        "\x01"),
                      "header is not valid JSON: NUL byte at offset 53");
}

TEST_F(SafetensorsTest, RejectsAHeaderWithInvalidUtf8) {
  expect_format_error(write_with_header("{\"\xff\xfe\":{}}", ""), "header is not valid JSON");
}

TEST_F(SafetensorsTest, RejectsDuplicateKeys) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                        R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                        "\x01\x02"),
                      "header has the key \"a\" more than once");
}

// nlohmann's dump recurses once per level, and quoting a value 100,000 levels deep in an error
// message overflowed the stack; the header's own depth is 3 (object, entry, shape).
TEST_F(SafetensorsTest, RejectsNestingDeeperThanAHeaderHas) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_format_error(write_with_header("{\"a\":" + deep + "}", ""), "header nests JSON more than 3 levels deep");
  expect_format_error(write_with_header(R"({"__metadata__":{"k":{"x":[1]}}})", ""), "more than 3 levels deep");
}

// Numbers that do not fit 64 bits, negative or fractional ones, and strings where numbers belong
// are refused with the tensor named, never passed to nlohmann's get<> (which throws type_error).
TEST_F(SafetensorsTest, RejectsNumbersThatAreNotSizes) {
  for (const char* offsets : {"[0,1e30]", "[0,18446744073709551616]", "[-4,0]", "[0,4.0]", "[\"0\",\"4\"]", "[0,4,8]"})
    expect_format_error(write_with_header(str(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":)", offsets, "}}"),
                                          std::string(4, '\0')),
                        "tensor \"w\": data_offsets must be [begin, end] with non-negative integers");
  for (const char* shape : {"[18446744073709551616]", "[1e30]", "[\"1\"]", "[null]", "[true]"})
    expect_format_error(write_with_header(str(R"({"w":{"dtype":"F32","shape":)", shape, R"(,"data_offsets":[0,4]}})"),
                                          std::string(4, '\0')),
                        "tensor \"w\": shape");
  expect_format_error(write_with_header(R"({"w":{"dtype":"F32","shape":[9223372036854775807],"data_offsets":[0,4]}})",
                                        std::string(4, '\0')),
                      "needs more than 2^64 bytes");
  expect_format_error(write_with_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} )" +
                                            std::string(R"({"more":1})"),
                                        std::string(4, '\0')),
                      "header is not valid JSON");
}

TEST_F(SafetensorsTest, RejectsAnEntryMissingAField) {
  expect_format_error(write_with_header(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", "\x01"), "tensor \"a\": no \"dtype\"");
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", "\x01"), "no \"shape\"");
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","shape":[1]}})", "\x01"), "no \"data_offsets\"");
}

TEST_F(SafetensorsTest, RejectsEntriesOfTheWrongJsonType) {
  expect_format_error(write_with_header(R"({"a":5})", ""), "expected an object with dtype, shape and data_offsets, found 5");
  expect_format_error(write_with_header(R"({"a":{"dtype":8,"shape":[1],"data_offsets":[0,1]}})", "\x01"),
                      "dtype must be a string");
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","shape":"1","data_offsets":[0,1]}})", "\x01"),
                      "shape must be an array");
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "\x01"),
                      "sizes must be integers");
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "\x01"),
                      "data_offsets must be [begin, end]");
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":{"begin":0}}})", "\x01"),
                      "data_offsets must be [begin, end]");
}

TEST_F(SafetensorsTest, RejectsADtypeWeftDoesNotHave) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}})", "\x01\x02"),
                      "dtype \"I16\" is not supported by weft (it reads F64 F32 F16 BF16 I64 I32 I8 U8 BOOL)");
}

TEST_F(SafetensorsTest, RejectsANegativeSize) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""),
                      "shape [-1] has a negative size");
}

TEST_F(SafetensorsTest, RejectsAShapeTooLargeToIndex) {
  expect_format_error(
      write_with_header(R"({"a":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", ""),
      "more elements than a tensor can index");
}

TEST_F(SafetensorsTest, RejectsOffsetsThatBeginAfterTheyEnd) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}})", "\x01\x02"),
                      "data_offsets [2, 1] begin after they end");
}

TEST_F(SafetensorsTest, RejectsOffsetsPastTheDataSection) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "12345678"),
                      "data_offsets [0, 16] run past the end of the data section (8 bytes)");
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                        std::string(12, '\0')),
                      "tensors \"a\" [0, 8) and \"b\" [4, 12) overlap");
}

TEST_F(SafetensorsTest, RejectsAGapBetweenTensors) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                        std::string(12, '\0')),
                      "bytes [4, 8) of the data section belong to no tensor");
}

TEST_F(SafetensorsTest, RejectsBytesAfterTheLastTensor) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, '\0')),
                      "bytes [4, 8) at the end of the data section belong to no tensor");
}

TEST_F(SafetensorsTest, RejectsAShapeThatDisagreesWithTheByteCount) {
  expect_format_error(write_with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
                      "shape [3] of F32 needs 12 bytes but data_offsets [0, 8] hold 8");
}

TEST_F(SafetensorsTest, RejectsMetadataThatIsNotAStringMap) {
  expect_format_error(write_with_header(R"({"__metadata__":{"step":12}})", ""), "must map strings to strings, but \"step\" holds 12");
  expect_format_error(write_with_header(R"({"__metadata__":["pt"]})", ""), "must be an object of strings");
}

TEST_F(SafetensorsTest, RejectsBoolBytesOtherThanZeroOrOne) {
  std::string file = write_with_header(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x00\x02", 3));
  std::string message = message_of<FormatError>([&] { load_safetensors(file); });
  EXPECT_TRUE(contains(message, "tensor \"m\" is BOOL but element 2 holds the byte 2")) << message;
}

// ---- another implementation reads what weft writes

// Runs tests/io/safetensors_reference.py (plain Python + torch, no shared code) when that
// interpreter is present: the C++ tests above only show weft agrees with itself.
TEST_F(SafetensorsTest, IndependentReaderReadsWeftFiles) {
  const fs::path script = fs::path(__FILE__).parent_path() / "safetensors_reference.py";
  if (!fs::exists(script) || std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs /usr/bin/python3 with torch and " << script;

  const std::string checksum = save_safetensors(
      path("w.safetensors"),
      {{"weight", Tensor::arange(6).view({2, 3})},
       {"half", Tensor::from_vector({1.5, -2, 4}, {3}, DType::bf16)},
       {"mask", Tensor::from_vector({1, 0, 1}, {3}, DType::boolean)},
       {"ids", Tensor::from_vector({-5, 7}, {2}, DType::i64)},
       {"none", Tensor::empty({0, 3}, DType::f16)},
       {"scale", Tensor::scalar(2.25, DType::f64)},
       {"q", Tensor::from_vector({-128, 127, 3}, {3}, DType::i8)},
       {"pixels", Tensor::from_vector({255, 1}, {2}, DType::u8)},
       {"counts", Tensor::arange(4, DType::i32).view({2, 2}).t()}},
      {{"format", "pt"}});
  const std::string output = path("reference.txt");
  std::string command = str("/usr/bin/python3 ", script.string(), " ", path("w.safetensors"), " > ", output, " 2>&1");
  ASSERT_EQ(std::system(command.c_str()), 0) << read_file(output);
  EXPECT_EQ(read_file(output),
            // The reader lists tensors in data order: 8-byte elements first, then 4, 2, 1.
            "ids int64 [2] 2\n"
            "scale float64 [] 2.25\n"
            "weight float32 [2, 3] 15\n"
            "counts int32 [2, 2] 6\n"
            "half bfloat16 [3] 3.5\n"
            "none float16 [0, 3] 0\n"
            "mask bool [3] 2\n"
            "q int8 [3] 2\n"
            "pixels uint8 [2] 256\n"
            "metadata format=pt\n"
            "metadata weft.checksum=" + checksum + "\n");

  // And it refuses what weft refuses.
  std::string gap = write_with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, '\0'));
  EXPECT_NE(std::system(str("/usr/bin/python3 ", script.string(), " ", gap, " >/dev/null 2>&1").c_str()), 0);
}

}  // namespace
}  // namespace weft::io
