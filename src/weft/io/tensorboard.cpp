#include "weft/io/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "weft/core/error.h"
#include "weft/io/input_file.h"

namespace weft::io {
namespace {

static_assert(std::endian::native == std::endian::little, "records are written with memcpy as little-endian");

constexpr std::array<uint32_t, 256> kCrcTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[byte] = crc;
  }
  return table;
}();

constexpr uint64_t kSessionStart = 1;  // SessionLog.SessionStatus.START

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  for (; value >= 0x80; value >>= 7) out += static_cast<char>(value | 0x80);
  out += static_cast<char>(value);
}
void put_key(std::string& out, uint32_t field, WireType wire) { put_varint(out, field << 3 | wire); }
template <typename T>
void put_fixed(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_key(event, 1, kFixed64);
  put_fixed(event, wall_time);
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));
  }
  return event;
}

// A bounds-checked walk over bytes [pos, end) of a file; pos stays a file offset for messages.
constexpr int kMaxGroupDepth = 100;

struct Cursor {
  const std::string& path;
  const uint8_t* bytes;
  size_t pos, end;
  uint64_t base;  // the file offset of bytes[0]
  int group_depth = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(str(path, ": ", what, " at byte offset ", base + pos, "; the event file is corrupt"));
  }
  bool done() const { return pos == end; }
  void need(uint64_t n) const {
    if (n > end - pos) fail(str("need ", n, " more bytes but only ", end - pos, " remain"));
  }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const uint8_t byte = bytes[pos++];
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    fail("varint longer than 10 bytes");
  }
  template <typename T>
  T fixed() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes + pos, sizeof value);
    pos += sizeof value;
    return value;
  }
  Cursor take(uint64_t n) {
    need(n);
    pos += n;
    return {path, bytes, pos - n, pos, base, group_depth};
  }
  Cursor length_delimited() { return take(varint()); }
  std::pair<uint32_t, uint32_t> key() {
    const uint64_t key = varint();
    if (key >> 3 == 0 || key >> 3 > 0x1FFFFFFF) fail(str("invalid protobuf field number ", key >> 3));
    return {static_cast<uint32_t>(key >> 3), static_cast<uint32_t>(key & 7)};
  }
  void skip(uint32_t field, uint32_t wire) {
    switch (wire) {
      case kVarint: varint(); return;
      case kFixed64: take(8); return;
      case kLengthDelimited: length_delimited(); return;
      case kFixed32: take(4); return;
      case kStartGroup:
        // Groups nest, and each level is a stack frame: bound them as protobuf's own parser does.
        if (++group_depth > kMaxGroupDepth) fail(str("protobuf groups nested deeper than ", kMaxGroupDepth));
        for (;;) {
          const auto [inner, inner_wire] = key();
          if (inner_wire == kEndGroup) {
            if (inner != field) fail(str("group ", field, " closed as ", inner));
            --group_depth;
            return;
          }
          skip(inner, inner_wire);
        }
      default: fail(str("unexpected protobuf wire type ", wire));
    }
  }
};

void decode_summary(Cursor summary, int64_t step, double wall_time, std::vector<ScalarEvent>& out) {
  while (!summary.done()) {
    const auto [field, wire] = summary.key();
    if (field != 1 || wire != kLengthDelimited) {
      summary.skip(field, wire);
      continue;
    }
    Cursor value = summary.length_delimited();
    ScalarEvent scalar{{}, step, wall_time, 0};
    bool is_scalar = false;
    while (!value.done()) {
      const auto [value_field, value_wire] = value.key();
      if (value_field == 1 && value_wire == kLengthDelimited) {
        const Cursor tag = value.length_delimited();
        scalar.tag.assign(reinterpret_cast<const char*>(tag.bytes + tag.pos), tag.end - tag.pos);
      } else if (value_field == 2 && value_wire == kFixed32) {
        scalar.value = value.fixed<float>();
        is_scalar = true;
      } else {
        value.skip(value_field, value_wire);
      }
    }
    if (is_scalar) out.push_back(std::move(scalar));
  }
}

// Step and wall_time may follow the summary in a valid encoding, so summaries wait for the end.
void decode_event(Cursor event, EventFile& out) {
  double wall_time = 0;
  int64_t step = 0;
  bool starts_session = false;
  std::vector<Cursor> summaries;
  while (!event.done()) {
    const auto [field, wire] = event.key();
    if (field == 1 && wire == kFixed64) {
      wall_time = event.fixed<double>();
    } else if (field == 2 && wire == kVarint) {
      step = static_cast<int64_t>(event.varint());
    } else if (field == 3 && wire == kLengthDelimited) {
      const Cursor version = event.length_delimited();
      out.file_version.assign(reinterpret_cast<const char*>(version.bytes + version.pos), version.end - version.pos);
    } else if (field == 5 && wire == kLengthDelimited) {
      summaries.push_back(event.length_delimited());
    } else if (field == 7 && wire == kLengthDelimited) {
      Cursor session_log = event.length_delimited();
      while (!session_log.done()) {
        const auto [log_field, log_wire] = session_log.key();
        if (log_field == 1 && log_wire == kVarint) starts_session = session_log.varint() == kSessionStart;
        else session_log.skip(log_field, log_wire);
      }
    } else {
      event.skip(field, wire);
    }
  }
  if (starts_session) {
    std::erase_if(out.scalars, [step](const ScalarEvent& scalar) { return scalar.step >= step; });
    out.session_starts.push_back(step);
  }
  for (const Cursor& summary : summaries) decode_summary(summary, step, wall_time, out.scalars);
}


}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = ~0u;
  for (size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventWriter::EventWriter(const std::string& log_dir) {
  std::error_code error;
  std::filesystem::create_directories(log_dir, error);
  if (error) throw IOError(str("cannot create TensorBoard log directory ", log_dir, ": ", error.message()));
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  const double now = unix_time_now();
  const std::string stem = str("events.out.tfevents.", static_cast<int64_t>(now), ".", host, ".", getpid(), ".");
  for (int n = 0; !file_; ++n) {
    path_ = (std::filesystem::path(log_dir) / (stem + std::to_string(n))).string();
    file_.reset(std::fopen(path_.c_str(), "wbx"));  // x: fail with EEXIST rather than clobber
    if (!file_ && errno != EEXIST) throw IOError(str("cannot create TensorBoard event file ", path_, ": ", std::strerror(errno)));
  }
  std::string event = event_header(now, 0);
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
}

void EventWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  WEFT_CHECK(!tag.empty(), ValueError, "EventWriter::add_scalar: the tag names the curve in TensorBoard and must not be empty");
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_key(summary_value, 2, kFixed32);
  put_fixed(summary_value, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void EventWriter::start_session(int64_t first_step, double wall_time) {
  std::string session_log;
  put_key(session_log, 1, kVarint);
  put_varint(session_log, kSessionStart);
  std::string event = event_header(wall_time, first_step);
  put_bytes(event, 7, session_log);
  write_record(event);
}

void EventWriter::write_record(const std::string& payload) {
  std::string record;
  put_fixed(record, static_cast<uint64_t>(payload.size()));
  put_fixed(record, masked_crc32c(record.data(), record.size()));
  record += payload;
  put_fixed(record, masked_crc32c(payload.data(), payload.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size())
    throw IOError(str("cannot write TensorBoard event file ", path_, ": ", std::strerror(errno)));
}

void EventWriter::flush() {
  if (std::fflush(file_.get()) != 0) throw IOError(str("cannot write TensorBoard event file ", path_, ": ", std::strerror(errno)));
}

namespace {

constexpr uint64_t kRecordHeaderBytes = 12, kRecordFooterBytes = 4;
constexpr uint64_t kReadChunkBytes = 1 << 20;

// Decodes the records of `file` from `offset` on, starting none past offset + max_bytes, into
// out, moving `offset` past each record decoded (so a corrupt one leaves it there). The file is read a chunk at a time, so
// memory is bounded by the chunk and the longest record decoded, whatever the file's size.
void decode_records(const InputFile& file, uint64_t& offset, uint64_t max_bytes, EventTail tail, EventFile& out) {
  const uint64_t end = file.size();
  const uint64_t stop = offset + std::min(max_bytes, end - std::min(offset, end));
  std::string chunk;
  uint64_t chunk_at = 0;
  const auto bytes_at = [&](uint64_t at, uint64_t n) {
    if (at < chunk_at || at + n > chunk_at + chunk.size()) {
      chunk.resize(std::min(std::max(n, kReadChunkBytes), end - at));
      file.read_at(chunk.data(), chunk.size(), at);
      chunk_at = at;
    }
    return reinterpret_cast<const uint8_t*>(chunk.data()) + (at - chunk_at);
  };
  while (offset < stop) {
    const auto fail = [&](const std::string& what) {
      throw FormatError(str(file.path(), ": record at byte offset ", offset, " ", what,
                            "; the event file is corrupt or was cut short"));
    };
    const auto unfinished = [&] {
      if (tail != EventTail::kInProgress) return false;
      out.unfinished_tail_bytes += end - offset;
      return true;
    };
    if (end - offset < kRecordHeaderBytes) {
      if (unfinished()) return;
      fail(str("is truncated: its 12-byte header has only ", end - offset, " bytes"));
    }
    const uint8_t* header = bytes_at(offset, kRecordHeaderBytes);
    uint64_t length;
    uint32_t length_crc;
    std::memcpy(&length, header, sizeof length);
    std::memcpy(&length_crc, header + sizeof length, sizeof length_crc);
    if (length_crc != masked_crc32c(header, sizeof length)) fail("has a length whose CRC-32C does not match");
    const uint64_t after_header = end - offset - kRecordHeaderBytes;
    if (after_header < kRecordFooterBytes || length > after_header - kRecordFooterBytes) {
      if (unfinished()) return;
      fail(str("is truncated: it needs ", length + kRecordFooterBytes, " bytes after its header but only ",
               after_header, " remain"));
    }
    const uint64_t record_bytes = kRecordHeaderBytes + length + kRecordFooterBytes;
    if (length <= kMaxDecodedRecordBytes) {
      const uint8_t* payload = bytes_at(offset, record_bytes) + kRecordHeaderBytes;
      uint32_t payload_crc;
      std::memcpy(&payload_crc, payload + length, sizeof payload_crc);
      if (payload_crc != masked_crc32c(payload, length)) fail("has a payload whose CRC-32C does not match");
      decode_event(Cursor{file.path(), payload, 0, length, offset + kRecordHeaderBytes}, out);
    }
    offset += record_bytes;
  }
}

void decode_file(const std::string& path, EventTail tail, EventFile& out) {
  const InputFile file(path, UINT64_MAX);
  uint64_t offset = 0;
  decode_records(file, offset, UINT64_MAX, tail, out);
}

}  // namespace

EventFile read_event_file(const std::string& path, EventTail tail) {
  EventFile out;
  decode_file(path, tail, out);
  return out;
}

void EventFileReader::read(uint64_t max_bytes, EventFile& out) {
  const InputFile file(path_, UINT64_MAX);
  decode_records(file, offset_, max_bytes, EventTail::kInProgress, out);
}

EventFile read_run_events(const std::string& log_dir, EventTail tail) {
  std::vector<std::string> paths;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(log_dir, error))
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) paths.push_back(entry.path().string());
  if (error) throw IOError(str("cannot list TensorBoard log directory ", log_dir, ": ", error.message()));
  std::sort(paths.begin(), paths.end());
  EventFile out;
  for (const std::string& path : paths) decode_file(path, tail, out);
  return out;
}

}  // namespace weft::io
