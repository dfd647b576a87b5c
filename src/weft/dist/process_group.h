// ProcessGroup: collectives among a set of ranks over MPI, as torch.distributed's process groups
// are, with the communication visible at the call site.
//
//   ProcessGroup& pg = ProcessGroup::world();              // every rank of the launch
//   pg.all_reduce(grad, ReduceOp::avg);                    // blocking: returns when done
//   Work w = pg.all_reduce_async(bucket, ReduceOp::sum);   // returns at once
//   ...                                                    // compute meanwhile
//   w.wait();                                              // or w.test(): done yet?
//
// Operations: all_reduce (sum, avg, max), reduce_scatter, all_gather, broadcast, barrier, send
// and recv, each blocking and as _async returning a Work, and ring_all_reduce, the Ring-AllReduce
// written here on send/recv (reduce-scatter, then all-gather, chunked and pipelined) beside MPI's
// own all-reduce. Tensors are contiguous f32, f64, bf16 or f16 (any dtype for broadcast, all_gather,
// send and recv); bf16 and f16 are reduced in f32 and rounded back once. all_reduce, ring_all_reduce
// and broadcast write the tensor given.
//
// Progress: Open MPI moves a non-blocking operation forward only while some thread is inside MPI.
// Each group therefore owns one thread that runs its _async operations, one after another in the
// order they were issued, with MPI's blocking calls: the caller does not enter MPI, so
// communication overlaps whatever it computes (DDP's buckets during backward). A blocking call
// made while nothing is queued or running runs on the caller's own thread instead: handing it to
// the group's thread and waiting cost 20 to 40 us for a small all-reduce and several hundred for
// a 1 MB one with both cores busy, against 1 and 180 us in place. Either way a group's operations
// complete in issue order on every rank, as collectives must be issued anyway. A Work keeps its
// tensors alive; the caller must not touch them until wait() returns.
//
// Sequence numbers: the n-th operation issued on a group is number n (from 1), the same on every
// rank for collectives. status() gives the last issued and the last completed (number, op, bytes),
// and the bytes of every operation issued so far.
//
// Watchdog (set_timeout, weft train's --comm-timeout): an operation still running after the
// timeout means some rank never issued its side of it (stuck, or gone). A watchdog thread then
// prints, on every rank waiting, one line with the operation it waits in and the last one that
// completed on that group, leaves the other ranks two seconds to print theirs, and aborts the job
// (MPI_Abort, exit status 3): the rank whose line is missing, or shows an earlier number, is the
// one to look at. Off (0) by default.
//
// A group of one rank (a process no launcher started) completes every operation at once without
// MPI: a reduction leaves the tensor as it is, all_gather copies.
//
// Errors (a shape that does not fit the group, a received message of the wrong size, an MPI
// failure) are weft::Errors, thrown by the blocking call or by wait().
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "weft/core/tensor.h"

namespace weft::dist {

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

// One issued operation, as status() reports it.
struct OpRecord {
  int64_t seq = 0;  // 0: none yet
  std::string op;   // "all_reduce", "ring_all_reduce", "broadcast", ...
  int64_t bytes = 0;
};

class Work {
 public:
  Work() = default;
  bool test() const;  // whether it has run (true for a default Work)
  void wait() const;  // blocks until it has run; rethrows its error (every time it is called)
  int64_t seq() const;

 private:
  friend class ProcessGroup;
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
    int64_t seq = 0;
    std::vector<Tensor> keep_alive;
  };
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  // Every rank of the launch (world size 1 without one).
  static ProcessGroup& world();
  // The ranks of this group that pass the same `color`, ordered by `key` then rank: every rank of
  // this group calls it (MPI_Comm_split). Tensor- and pipeline-parallel groups are cut this way.
  std::unique_ptr<ProcessGroup> split(int color, int key);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  void all_reduce(Tensor& t, ReduceOp op);
  Work all_reduce_async(Tensor& t, ReduceOp op);
  // Compressed (gradient compression): t (any floating dtype; sum or avg) travels as `wire`, bf16 or
  // f16, half of f32's bytes. Each partial sum is computed in f32 and rounded back to `wire` (a
  // user-defined MPI reduction), so the rounding is one per addition, not a 16-bit accumulator's
  // drift; avg divides the widened sum. t ends as that result, in its own dtype.
  Work all_reduce_async(Tensor& t, ReduceOp op, DType wire);
  void ring_all_reduce(Tensor& t, ReduceOp op);
  Work ring_all_reduce_async(Tensor& t, ReduceOp op);
  // input [size * n] -> output [n]: this rank's share of the reduced input.
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op);
  Work reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op);
  // input [n] -> output [size * n]: every rank's input in rank order. The input may be this
  // rank's own slice of the output (gathered in place).
  void all_gather(const Tensor& input, Tensor& output);
  Work all_gather_async(const Tensor& input, Tensor& output);
  void broadcast(Tensor& t, int root);
  Work broadcast_async(Tensor& t, int root);
  void barrier();
  Work barrier_async();
  // Whether `flag` holds on any rank of the group (one small all-reduce): how ranks agree to redo
  // a step or to fail a save together.
  bool any(bool flag);
  void send(const Tensor& t, int to, int tag = 0);
  Work send_async(const Tensor& t, int to, int tag = 0);
  void recv(Tensor& t, int from, int tag = 0);
  Work recv_async(Tensor& t, int from, int tag = 0);
  // Sends `out` to `to` and receives `in` from `from` in one operation (MPI_Sendrecv): two ranks
  // that send to each other at once cannot deadlock, as two blocking sends could (a pipeline's
  // activations going forward while gradients come back).
  void send_recv(const Tensor& out, int to, Tensor& in, int from, int tag = 0);
  Work send_recv_async(const Tensor& out, int to, Tensor& in, int from, int tag = 0);

  struct Status {
    OpRecord issued, completed;
    int64_t bytes_issued = 0;  // every operation's bytes so far (a send_recv's both ways)
  };
  Status status() const;

  // Seconds an operation may run before the watchdog reports it and aborts; 0: never. For every
  // group of this process.
  static void set_timeout(double seconds);

 private:
  struct Comm;  // the MPI communicator, when there is one
  ProcessGroup(std::unique_ptr<Comm> comm, int rank, int size);
  // Queues `run` (executed on the group's thread) as operation `op` of `bytes`.
  Work issue(const char* op, int64_t bytes, std::vector<Tensor> keep_alive, std::function<void()> run);
  void serve();
  void start_running(const OpRecord& record);  // under mutex_
  static void watch();                         // the watchdog thread's loop

  std::unique_ptr<Comm> comm_;
  int rank_, size_;
  mutable std::mutex mutex_;
  std::condition_variable queued_cv_;
  struct Queued {
    std::shared_ptr<Work::State> state;
    OpRecord record;
    std::function<void()> run;
  };
  std::deque<Queued> queue_;
  OpRecord issued_, completed_, running_;  // running_: valid while busy_
  int64_t bytes_issued_ = 0;
  std::chrono::steady_clock::time_point running_since_;
  bool stopping_ = false;
  bool busy_ = false;  // an operation is running (on the group's thread or a caller's)
  std::thread thread_;  // started with the first operation of a group of more than one rank
};

}  // namespace weft::dist
