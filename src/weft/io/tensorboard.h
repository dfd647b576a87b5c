// TensorBoard event files, written and read without TensorFlow or a protobuf library, so that
// `tensorboard --logdir` plots weft's training curves. A file is a run of TFRecords:
//   u64 LE length | u32 LE masked CRC-32C of those 8 bytes | payload | u32 LE masked CRC-32C of payload
// and each payload is one protobuf `Event`. The first record carries only wall_time and
// file_version "brain.Event:2" (TensorBoard keys its restart handling off that version); every
// later record is one scalar, or a SessionLog START marking where a resumed run restarts.
// Field numbers, checked against tensorflow/tensorboard's
// compat/proto/event.proto and summary.proto: Event{wall_time=1 double, step=2 int64,
// file_version=3 string, summary=5 Summary, session_log=7 SessionLog}, Summary{value=1 repeated
// Value}, Summary.Value{tag=1 string, simple_value=2 float}, SessionLog{status=1 enum, START=1}. Events are encoded as a protobuf library
// would (fields in number order, a zero step omitted), so they re-serialize to the same bytes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace weft::io {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord uses.
uint32_t crc32c(const void* data, size_t n);
// TFRecord stores the CRC rotated and offset, because a CRC of data that itself holds CRCs is weak.
uint32_t masked_crc32c(const void* data, size_t n);

double unix_time_now();

class EventWriter {
 public:
  // Creates log_dir (and parents) and a new events.out.tfevents.<seconds>.<host>.<pid>.<n> in
  // it; n counts up past files already there, so two writers never clobber each other.
  explicit EventWriter(const std::string& log_dir);

  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time = unix_time_now());
  // A run resumed from a checkpoint logs again the steps after it. With file_version 2,
  // TensorBoard drops every point at or after `first_step` when it reads this marker (what
  // PyTorch's SummaryWriter(purge_step=) writes), so the curves show each step once.
  void start_session(int64_t first_step, double wall_time = unix_time_now());
  // Records are buffered; flush makes them visible to a live TensorBoard and reports write
  // errors, which the destructor (closing the file) can only swallow.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);

  struct CloseFile {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, CloseFile> file_;
};

struct ScalarEvent {
  std::string tag;
  int64_t step;
  double wall_time;
  float value;
};

struct EventFile {
  std::string file_version;
  // In file order; values other than simple_value are skipped, and a session start drops the
  // scalars read before it at or after its step, as TensorBoard does.
  std::vector<ScalarEvent> scalars;
  // The step of each session start read, in file order.
  std::vector<int64_t> session_starts;
  // With EventTail::kInProgress: the bytes of an incomplete last record, left unread.
  uint64_t unfinished_tail_bytes = 0;
};

// A writer still running may have written only part of its last record (stdio writes its buffer
// when full, wherever a record ends). kComplete calls that a truncated file; kInProgress reads the
// records before it, as TensorBoard does while a run is in progress. A bad CRC is an error in both.
enum class EventTail { kComplete, kInProgress };

// Checks both CRCs of every record (one longer than kMaxDecodedRecordBytes is passed over, as by
// EventFileReader): a truncated or corrupt record is a FormatError naming the file and the
// record's byte offset, a missing file an IOError.
EventFile read_event_file(const std::string& path, EventTail tail = EventTail::kComplete);
inline std::vector<ScalarEvent> read_scalar_events(const std::string& path, EventTail tail = EventTail::kComplete) {
  return read_event_file(path, tail).scalars;
}
// An event file read a piece at a time, as a writer appends to it: each read picks up at the
// record where the last one stopped, so a file that grows costs only its new bytes.
class EventFileReader {
 public:
  explicit EventFileReader(std::string path) : path_(std::move(path)) {}
  // Decodes into `out` the whole records from offset() on, starting no record past max_bytes
  // beyond it; an unfinished last record waits for the next read. A record longer than
  // kMaxDecodedRecordBytes is passed over unread: scalars are a few dozen bytes, and the board
  // plots nothing else. A corrupt record is a FormatError as read_event_file's, thrown with the
  // records before it in `out` and offset() left at it.
  void read(uint64_t max_bytes, EventFile& out);
  uint64_t offset() const { return offset_; }

 private:
  std::string path_;
  uint64_t offset_ = 0;
};
inline constexpr uint64_t kMaxDecodedRecordBytes = 16 << 20;

// Every events.out.tfevents.* file of a run's directory, in name order (the order of their
// creation times, as TensorBoard reads them), with session starts applied across files.
EventFile read_run_events(const std::string& log_dir, EventTail tail = EventTail::kComplete);

}  // namespace weft::io
