#include "weft/io/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "expect_error.h"
#include "weft/core/error.h"

namespace {

namespace fs = std::filesystem;
using weft::testing::contains;
using weft::testing::message_of;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Little-endian bytes, spelled out so expectations do not lean on the code under test.
std::string le(uint64_t value, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += static_cast<char>(value >> (8 * i));
  return out;
}
std::string frame(const std::string& payload) {
  const std::string length = le(payload.size(), 8);
  return length + le(weft::io::masked_crc32c(length.data(), 8), 4) + payload +
         le(weft::io::masked_crc32c(payload.data(), payload.size()), 4);
}

// The file_version record: 0x09 + 8-byte wall_time, 0x1A 0x0D "brain.Event:2", framed.
constexpr size_t kVersionRecordBytes = 8 + 4 + 24 + 4;

class TensorBoard : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = (fs::temp_directory_path() / "weft_tensorboard_XXXXXX").string();
    ASSERT_NE(mkdtemp(name.data()), nullptr);
    dir = name;
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
};

TEST(Crc32c, MatchesPublishedVectors) {
  using weft::io::crc32c;
  const std::string zeros(32, '\0'), ones(32, '\xFF');
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32c, MaskedRotatesAndOffsets) {
  // ror(0xE3069283, 15) + 0xA282EAD8 mod 2^32, worked out by hand in Python.
  EXPECT_EQ(weft::io::masked_crc32c("123456789", 9), 0xC78AB0E5u);
}

TEST_F(TensorBoard, RecordFramingIsByteExact) {
  std::string path;
  {
    weft::io::EventWriter writer(dir);
    writer.add_scalar("loss", 0.5, 300, 1.25);
    path = writer.path();
  }
  const std::string bytes = slurp(path);
  ASSERT_EQ(bytes.size(), kVersionRecordBytes + 8 + 4 + 27 + 4);

  EXPECT_EQ(bytes.substr(0, 8), le(24, 8));
  EXPECT_EQ(bytes[12], '\x09');
  EXPECT_EQ(bytes.substr(21, 15), std::string("\x1A\x0D" "brain.Event:2"));

  const std::string payload = std::string("\x09\0\0\0\0\0\0\xF4\x3F", 9)  // wall_time 1.25
                              + "\x10\xAC\x02"                            // step 300
                              + "\x2A\x0D"                                // summary, 13 bytes
                              + "\x0A\x0B"                                // value, 11 bytes
                              + "\x0A\x04" "loss"                         // tag
                              + std::string("\x15\0\0\0\x3F", 5);         // simple_value 0.5f
  const std::string record = le(27, 8) + le(0x139E0D1A, 4) + payload + le(0x35F8B641, 4);  // CRCs from Python
  EXPECT_EQ(bytes.substr(kVersionRecordBytes), record);
}

TEST_F(TensorBoard, ScalarsRoundTripAcrossTagsAndSteps) {
  const double before = weft::io::unix_time_now();
  weft::io::EventWriter writer(dir + "/run/nested");
  EXPECT_EQ(fs::path(writer.path()).parent_path(), fs::path(dir + "/run/nested"));
  EXPECT_TRUE(fs::path(writer.path()).filename().string().starts_with("events.out.tfevents."));
  for (int64_t step : {0, 1, 2, 1000000, -3}) {
    writer.add_scalar("train/loss", 1.0 / (step + 4), step);
    writer.add_scalar("eval/accuracy", 0.1 * step, step, 1e9 + step);
  }
  writer.flush();

  const weft::io::EventFile file = weft::io::read_event_file(writer.path());
  EXPECT_EQ(file.file_version, "brain.Event:2");
  ASSERT_EQ(file.scalars.size(), 10u);
  size_t i = 0;
  for (int64_t step : {0, 1, 2, 1000000, -3}) {
    const weft::io::ScalarEvent& loss = file.scalars[i++];
    EXPECT_EQ(loss.tag, "train/loss");
    EXPECT_EQ(loss.step, step);
    EXPECT_EQ(loss.value, static_cast<float>(1.0 / (step + 4)));
    EXPECT_GE(loss.wall_time, before);
    EXPECT_LE(loss.wall_time, weft::io::unix_time_now());
    const weft::io::ScalarEvent& accuracy = file.scalars[i++];
    EXPECT_EQ(accuracy.tag, "eval/accuracy");
    EXPECT_EQ(accuracy.step, step);
    EXPECT_EQ(accuracy.value, static_cast<float>(0.1 * step));
    EXPECT_EQ(accuracy.wall_time, 1e9 + step);
  }
  EXPECT_TRUE(contains(message_of<weft::ValueError>([&] { writer.add_scalar("", 1, 1); }), "tag"));
}

TEST_F(TensorBoard, ASessionStartIsEncodedAsAProtobufLibraryWould) {
  weft::io::EventWriter writer(dir);
  writer.start_session(4, 2.5);
  writer.flush();
  // Event{wall_time=1: 2.5, step=2: 4, session_log=7: SessionLog{status=1: START=1}}.
  const std::string payload = std::string("\x09") + le(0x4004000000000000ull, 8) + "\x10\x04" + "\x3A\x02\x08\x01";
  EXPECT_EQ(slurp(writer.path()).substr(kVersionRecordBytes), frame(payload));
}

TEST_F(TensorBoard, ASessionStartDropsTheStepsARunRestartsFromAcrossFiles) {
  {
    weft::io::EventWriter killed(dir);
    for (int64_t step = 1; step <= 6; ++step) killed.add_scalar("loss", 1.0 * step, step);
    killed.add_scalar("other", 7, 5);
    killed.flush();
  }
  weft::io::EventWriter resumed(dir);  // a later name: TensorBoard reads it after the first
  resumed.start_session(4);
  for (int64_t step = 4; step <= 7; ++step) resumed.add_scalar("loss", 10.0 * step, step);
  resumed.flush();

  const weft::io::EventFile run = weft::io::read_run_events(dir);
  EXPECT_EQ(run.session_starts, std::vector<int64_t>{4});
  std::vector<std::pair<int64_t, float>> loss;
  for (const weft::io::ScalarEvent& e : run.scalars) {
    EXPECT_EQ(e.tag, "loss") << "step " << e.step << " of the killed run's other curve is dropped too";
    loss.emplace_back(e.step, e.value);
  }
  const std::vector<std::pair<int64_t, float>> expected = {{1, 1}, {2, 2}, {3, 3}, {4, 40}, {5, 50}, {6, 60}, {7, 70}};
  EXPECT_EQ(loss, expected);
  EXPECT_EQ(weft::io::read_event_file(resumed.path()).scalars.size(), 4u);
}

TEST_F(TensorBoard, DeeplyNestedGroupsAreAFormatErrorNotAStackOverflow) {
  // Event field 9 opened as a group a million times (key 9<<3|3 = 0x4B): each level would be a
  // frame of a recursive skip.
  const std::string payload(1000000, '\x4B');
  spit(dir + "/deep", frame("\x09" + le(0, 8)) + frame(payload));
  EXPECT_TRUE(contains(message_of<weft::FormatError>([&] { weft::io::read_event_file(dir + "/deep"); }),
                       "nested deeper than"));
}

TEST_F(TensorBoard, WritersSharingADirectoryDoNotClobber) {
  weft::io::EventWriter first(dir), second(dir);
  EXPECT_NE(first.path(), second.path());
  first.add_scalar("a", 1, 1);
  second.add_scalar("b", 2, 1);
  first.flush();
  second.flush();
  EXPECT_EQ(weft::io::read_scalar_events(first.path()).at(0).tag, "a");
  EXPECT_EQ(weft::io::read_scalar_events(second.path()).at(0).tag, "b");
}

TEST_F(TensorBoard, ReaderSkipsFieldsItDoesNotKnow) {
  const std::string image_value = "\x0A\x03img" "\x22\x02" "\x08\x01";  // tag + Summary.Value.image
  const std::string scalar_value = std::string("\x0A\x01x" "\x15\0\0\x80\x3F", 8)  // tag "x", 1.0f
                                   + std::string("\x4A\x00", 2);                    // empty metadata
  const std::string summary = "\x0A" + std::string(1, static_cast<char>(image_value.size())) + image_value +
                              "\x0A" + std::string(1, static_cast<char>(scalar_value.size())) + scalar_value;
  const std::string event = std::string("\x2A") + static_cast<char>(summary.size()) + summary  // summary first
                            + "\x52\x03\x0A\x01w"                                           // source_metadata
                            + "\xF8\x01\x96\x01"                                            // field 31 varint
                            + std::string("\x61\0\0\0\0\0\0\0\0", 9)                        // field 12 fixed64
                            + std::string("\x6D\0\0\0\0", 5)                                // field 13 fixed32
                            + "\x73\x08\x05\x74"                                            // group 14 {1: 5}
                            + "\x10\x07";                                                   // step 7, last
  const std::string path = dir + "/handmade.tfevents";
  spit(path, frame(event));
  const auto scalars = weft::io::read_scalar_events(path);
  ASSERT_EQ(scalars.size(), 1u);
  EXPECT_EQ(scalars[0].tag, "x");
  EXPECT_EQ(scalars[0].value, 1.0f);
  EXPECT_EQ(scalars[0].step, 7);

  spit(path, frame("\x73\x08\x05\x7C"));  // group 14 closed as 15
  EXPECT_TRUE(contains(message_of<weft::FormatError>([&] { weft::io::read_event_file(path); }), "group 14"));
}

TEST_F(TensorBoard, CorruptByteIsFormatErrorNamingTheRecordOffset) {
  std::string path;
  {
    weft::io::EventWriter writer(dir);
    writer.add_scalar("loss", 0.5, 1);
    writer.add_scalar("loss", 0.25, 2);
    path = writer.path();
  }
  const std::string good = slurp(path);
  const size_t second_scalar = kVersionRecordBytes + (good.size() - kVersionRecordBytes) / 2;
  std::string bad = good;
  bad[second_scalar + 20] ^= 0x01;
  spit(path, bad);
  const std::string message = message_of<weft::FormatError>([&] { weft::io::read_event_file(path); });
  EXPECT_TRUE(contains(message, path)) << message;
  EXPECT_TRUE(contains(message, "byte offset " + std::to_string(second_scalar))) << message;
  EXPECT_TRUE(contains(message, "CRC")) << message;

  bad = good;
  bad[kVersionRecordBytes + 1] ^= 0x01;  // a length byte
  spit(path, bad);
  EXPECT_TRUE(contains(message_of<weft::FormatError>([&] { weft::io::read_event_file(path); }),
                       "byte offset " + std::to_string(kVersionRecordBytes)));
}

TEST_F(TensorBoard, TruncatedFileIsFormatError) {
  std::string path;
  {
    weft::io::EventWriter writer(dir);
    writer.add_scalar("loss", 0.5, 1);
    path = writer.path();
  }
  const std::string good = slurp(path);
  for (size_t cut : {good.size() - 1, kVersionRecordBytes + 5, size_t{3}}) {
    spit(path, good.substr(0, cut));
    const std::string message = message_of<weft::FormatError>([&] { weft::io::read_event_file(path); });
    EXPECT_TRUE(contains(message, "truncated")) << message;
    EXPECT_TRUE(contains(message, path)) << message;
    EXPECT_TRUE(contains(message, cut > kVersionRecordBytes ? "byte offset 40" : "byte offset 0")) << message;
  }
}

TEST_F(TensorBoard, InProgressReadsTheRecordsBeforeAnUnfinishedLastOne) {
  std::string path;
  {
    weft::io::EventWriter writer(dir);
    writer.add_scalar("loss", 0.5, 1);
    writer.add_scalar("loss", 0.25, 2);
    path = writer.path();
  }
  const std::string good = slurp(path);
  const size_t second_scalar = kVersionRecordBytes + (good.size() - kVersionRecordBytes) / 2;
  for (size_t cut : {good.size() - 1, second_scalar + 5, second_scalar + 13}) {
    spit(path, good.substr(0, cut));
    const weft::io::EventFile file = weft::io::read_event_file(path, weft::io::EventTail::kInProgress);
    ASSERT_EQ(file.scalars.size(), 1u) << cut;
    EXPECT_EQ(file.scalars[0].value, 0.5f);
    EXPECT_EQ(file.unfinished_tail_bytes, cut - second_scalar);
  }
  std::string bad = good;
  bad[second_scalar + 20] ^= 0x01;  // a finished record that is wrong is still an error
  spit(path, bad);
  EXPECT_TRUE(contains(message_of<weft::FormatError>([&] {
                         weft::io::read_event_file(path, weft::io::EventTail::kInProgress);
                       }), "CRC"));
}

// Read in pieces (a max_bytes of 1 takes one record a read), a file gives what it holds, each
// read starting where the last stopped; a corrupt record appended later stops the reader at it.
TEST_F(TensorBoard, EventFileReaderPicksUpWhereItStopped) {
  weft::io::EventWriter writer(dir);
  writer.add_scalar("loss", 1, 1);
  writer.add_scalar("loss", 2, 2);
  writer.flush();
  weft::io::EventFileReader reader(writer.path());
  weft::io::EventFile read;
  reader.read(1, read);
  EXPECT_EQ(read.file_version, "brain.Event:2");
  EXPECT_EQ(reader.offset(), kVersionRecordBytes);
  EXPECT_TRUE(read.scalars.empty());
  reader.read(1, read);
  ASSERT_EQ(read.scalars.size(), 1u);
  reader.read(UINT64_MAX, read);
  ASSERT_EQ(read.scalars.size(), 2u);
  EXPECT_EQ(read.scalars[1].value, 2.0f);
  const uint64_t end = std::filesystem::file_size(writer.path());
  EXPECT_EQ(reader.offset(), end);
  reader.read(UINT64_MAX, read);
  EXPECT_EQ(read.scalars.size(), 2u);
  writer.add_scalar("loss", 3, 3);
  writer.flush();
  {
    std::fstream file(writer.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-6, std::ios::end);
    file.put('\xFF');
  }
  EXPECT_TRUE(contains(message_of<weft::FormatError>([&] { reader.read(UINT64_MAX, read); }),
                       "record at byte offset " + std::to_string(end)));
  EXPECT_EQ(reader.offset(), end);
  EXPECT_EQ(read.scalars.size(), 2u);
}

TEST_F(TensorBoard, MissingFileIsIOError) {
  const std::string path = dir + "/absent.tfevents";
  const std::string message = message_of<weft::IOError>([&] { weft::io::read_event_file(path); });
  EXPECT_TRUE(contains(message, path)) << message;
  EXPECT_TRUE(contains(message, std::strerror(ENOENT))) << message;
}

TEST_F(TensorBoard, UnwritableDirectoryIsIOError) {
  // A regular file where a directory should be stops even root, unlike permission bits.
  spit(dir + "/file", "x");
  const std::string log_dir = dir + "/file/logs";
  const std::string message = message_of<weft::IOError>([&] { weft::io::EventWriter writer(log_dir); });
  EXPECT_TRUE(contains(message, log_dir)) << message;
  EXPECT_TRUE(contains(message, std::strerror(ENOTDIR))) << message;
}

}  // namespace
