#include "weft/dist/process_group.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <vector>

#include "weft/core/convert.h"
#include "weft/dist/world.h"

namespace weft::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

// ---- Work ----

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

void Work::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

int64_t Work::seq() const { return state_ ? state_->seq : 0; }

// ---- MPI helpers ----

namespace {

void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(str(call, " failed: ", std::string(text, static_cast<size_t>(length))));
}

int byte_count(const Tensor& t, const char* op) {
  WEFT_CHECK(t.nbytes() <= INT_MAX, ValueError, op, ": ", t.nbytes(), " bytes in one message; at most ", INT_MAX,
             " (MPI counts are int)");
  return static_cast<int>(t.nbytes());
}

void check_tensor(const Tensor& t, const char* op) {
  WEFT_CHECK(t.defined(), ValueError, op, ": undefined tensor");
  WEFT_CHECK(t.is_contiguous(), ValueError, op, ": the tensor ", shape_str(t.shape()),
             " is not contiguous; communicate a contiguous one (.contiguous())");
  WEFT_CHECK(t.device().is_cpu(), DeviceError, op, ": the tensor is on ", t.device(), "; this build communicates CPU tensors");
}

void check_reducible(const Tensor& t, const char* op) {
  check_tensor(t, op);
  const DType d = t.dtype();
  WEFT_CHECK(d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16, DTypeError, op,
             ": reduces f32, f64, bf16 or f16 tensors, got ", dtype_name(d));
}

// The tensor reductions run on: t itself (f32, f64), or its f32 widening (bf16, f16).
Tensor reduction_buffer(const Tensor& t) {
  if (t.dtype() == DType::f32 || t.dtype() == DType::f64) return t;
  return Tensor::empty(t.shape(), DType::f32).copy_(t);
}

MPI_Datatype mpi_type(DType d) { return d == DType::f64 ? MPI_DOUBLE : MPI_FLOAT; }

// inout[i] = round(widen(in[i]) + widen(inout[i])), for 16-bit floats in uint16 elements.
template <float (*widen)(uint16_t), uint16_t (*round)(float)>
void add_16_bit(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = round(widen(a[i]) + widen(b[i]));
}

// The MPI reduction that adds `wire` (bf16 or f16) elements in f32, created once.
MPI_Op sum_16_bit(DType wire) {
  static const MPI_Op bf16_sum = [] {
    MPI_Op op;
    mpi_check(MPI_Op_create(add_16_bit<bf16_bits_to_f32, f32_to_bf16_bits>, 1, &op), "MPI_Op_create");
    return op;
  }();
  static const MPI_Op f16_sum = [] {
    MPI_Op op;
    mpi_check(MPI_Op_create(add_16_bit<f16_bits_to_f32, f32_to_f16_bits>, 1, &op), "MPI_Op_create");
    return op;
  }();
  return wire == DType::bf16 ? bf16_sum : f16_sum;
}
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

// x[i] /= n: avg is the sum divided by the group's size (a division, as PyTorch's avg, not a
// multiplication by 1/n, which rounds differently).
template <typename T>
void divide(T* x, int64_t count, int n) {
  const T d = static_cast<T>(n);
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) x[i] /= d;
}

void divide(Tensor& t, int n) {
  if (t.dtype() == DType::f64) divide(t.data<double>(), t.numel(), n);
  else divide(t.data<float>(), t.numel(), n);
}

// a[i] = a[i] op b[i].
template <typename T>
void combine(T* a, const T* b, int64_t n, ReduceOp op) {
  if (op == ReduceOp::max) {
    for (int64_t i = 0; i < n; ++i) a[i] = a[i] >= b[i] || a[i] != a[i] ? a[i] : b[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
}

}  // namespace

struct ProcessGroup::Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm ring = MPI_COMM_NULL;  // the ring's messages, apart from the caller's sends and receives
  ~Comm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Comm_free(&ring);
    MPI_Comm_free(&comm);
  }
};

// ---- the watchdog ----

namespace {
// Every group with a communicator, for the watchdog. Never destroyed: the detached watchdog thread
// may still read them while static objects are torn down at exit.
std::mutex& groups_mutex = *new std::mutex;
std::vector<ProcessGroup*>& groups = *new std::vector<ProcessGroup*>;
std::atomic<double> timeout_seconds{0};
}  // namespace

void ProcessGroup::set_timeout(double seconds) {
  WEFT_CHECK(seconds >= 0, ValueError, "the communication timeout must be >= 0 seconds, got ", seconds);
  timeout_seconds = seconds;
  static std::once_flag started;
  if (seconds > 0) std::call_once(started, [] { std::thread(watch).detach(); });
}

void ProcessGroup::start_running(const OpRecord& record) {
  busy_ = true;
  running_ = record;
  running_since_ = std::chrono::steady_clock::now();
}

void ProcessGroup::watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double limit = timeout_seconds;
    if (limit <= 0) continue;
    std::string report;
    {
      std::lock_guard all(groups_mutex);
      for (ProcessGroup* g : groups) {
        std::lock_guard lock(g->mutex_);
        if (!g->busy_) continue;
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - g->running_since_).count();
        if (waited < limit) continue;
        report = str("weft: rank ", dist::world().rank, ": ", g->running_.op, " #", g->running_.seq, " (", g->running_.bytes,
                     " bytes, a group of ", g->size_, " ranks) has not completed in ", waited, " s (--comm-timeout ",
                     limit, "); the last completed there is ", g->completed_.seq == 0 ? std::string("none") :
                     str(g->completed_.op, " #", g->completed_.seq, " (", g->completed_.bytes, " bytes)"),
                     ". A rank missing from these lines, or stopped at an earlier number, never issued it; aborting\n");
        break;
      }
    }
    if (report.empty()) continue;
    std::fputs(report.c_str(), stderr);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(2));  // the other ranks' lines
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

// ---- the group ----

ProcessGroup::ProcessGroup(std::unique_ptr<Comm> comm, int rank, int size)
    : comm_(std::move(comm)), rank_(rank), size_(size) {
  if (!comm_) return;
  std::lock_guard all(groups_mutex);
  groups.push_back(this);
}

ProcessGroup& ProcessGroup::world() {
  // Never destroyed: MPI_Finalize runs at exit, after which no communicator may be freed.
  static ProcessGroup* group = [] {
    const World& w = dist::world();
    if (!w.launched) return new ProcessGroup(nullptr, 0, 1);
    auto comm = std::make_unique<Comm>();
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm->comm), "MPI_Comm_dup");
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm->ring), "MPI_Comm_dup");
    return new ProcessGroup(std::move(comm), w.rank, w.size);
  }();
  return *group;
}

std::unique_ptr<ProcessGroup> ProcessGroup::split(int color, int key) {
  WEFT_CHECK(color >= 0, ValueError, "ProcessGroup::split: color must be >= 0, got ", color);
  if (!comm_) return std::unique_ptr<ProcessGroup>(new ProcessGroup(nullptr, 0, 1));
  auto comm = std::make_unique<Comm>();
  int rank = 0, size = 0;
  // Issued on the group's thread, in order with its other operations.
  issue("split", 0, {}, [&] {
    mpi_check(MPI_Comm_split(comm_->comm, color, key, &comm->comm), "MPI_Comm_split");
    mpi_check(MPI_Comm_dup(comm->comm, &comm->ring), "MPI_Comm_dup");
    MPI_Comm_rank(comm->comm, &rank);
    MPI_Comm_size(comm->comm, &size);
  }).wait();
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(comm), rank, size));
}

ProcessGroup::~ProcessGroup() {
  if (comm_) {
    std::lock_guard all(groups_mutex);
    groups.erase(std::find(groups.begin(), groups.end(), this));
  }
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

ProcessGroup::Status ProcessGroup::status() const {
  std::lock_guard lock(mutex_);
  return {issued_, completed_, bytes_issued_};
}

namespace {
// Set by the blocking forms for the operation they issue: run it here if the group is idle.
thread_local bool run_here = false;

// Issues through `async` with run_here set, then waits.
template <typename Async>
void blocking(Async&& async) {
  run_here = true;
  Work work;
  try {
    work = async();
  } catch (...) {
    run_here = false;
    throw;
  }
  run_here = false;
  work.wait();
}
}  // namespace

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op) { blocking([&] { return all_reduce_async(t, op); }); }
void ProcessGroup::ring_all_reduce(Tensor& t, ReduceOp op) { blocking([&] { return ring_all_reduce_async(t, op); }); }
void ProcessGroup::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  blocking([&] { return reduce_scatter_async(input, output, op); });
}
void ProcessGroup::all_gather(const Tensor& input, Tensor& output) {
  blocking([&] { return all_gather_async(input, output); });
}
void ProcessGroup::broadcast(Tensor& t, int root) { blocking([&] { return broadcast_async(t, root); }); }
void ProcessGroup::barrier() { blocking([&] { return barrier_async(); }); }

bool ProcessGroup::any(bool flag) {
  Tensor any = Tensor::scalar(flag ? 1 : 0, DType::f32);
  all_reduce(any, ReduceOp::max);
  return any.item() > 0;
}
void ProcessGroup::send(const Tensor& t, int to, int tag) { blocking([&] { return send_async(t, to, tag); }); }
void ProcessGroup::recv(Tensor& t, int from, int tag) { blocking([&] { return recv_async(t, from, tag); }); }
void ProcessGroup::send_recv(const Tensor& out, int to, Tensor& in, int from, int tag) {
  blocking([&] { return send_recv_async(out, to, in, from, tag); });
}

Work ProcessGroup::issue(const char* op, int64_t bytes, std::vector<Tensor> keep_alive, std::function<void()> run) {
  Work work;
  work.state_ = std::make_shared<Work::State>();
  work.state_->keep_alive = std::move(keep_alive);
  std::unique_lock lock(mutex_);
  issued_ = {issued_.seq + 1, op, bytes};
  bytes_issued_ += bytes;
  work.state_->seq = issued_.seq;
  if (!comm_ || (run_here && queue_.empty() && !busy_)) {  // one rank, or an idle group: run it here
    const OpRecord record = issued_;
    start_running(record);
    lock.unlock();
    try {
      run();
    } catch (...) {
      work.state_->error = std::current_exception();
    }
    work.state_->done = true;
    lock.lock();
    busy_ = false;
    completed_ = record;
    queued_cv_.notify_all();  // what other threads queued meanwhile may start
    return work;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
  queue_.push_back({work.state_, issued_, std::move(run)});
  queued_cv_.notify_one();
  return work;
}

void ProcessGroup::serve() {
  for (;;) {
    Queued next;
    {
      std::unique_lock lock(mutex_);
      queued_cv_.wait(lock, [&] { return (stopping_ && !busy_) || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      start_running(next.record);
    }
    const std::shared_ptr<Work::State>& state = next.state;
    std::exception_ptr error;
    try {
      next.run();
    } catch (...) {
      error = std::current_exception();
    }
    // The tensors the operation captured go before it is reported done, so that after wait() the
    // group holds none of them (the caller may free them and count its memory).
    next.run = nullptr;
    {
      std::lock_guard lock(mutex_);
      completed_ = next.record;
      busy_ = false;
    }
    queued_cv_.notify_all();
    {
      std::lock_guard lock(state->mutex);
      state->error = error;
      state->done = true;
      state->keep_alive.clear();
    }
    state->done_cv.notify_all();
  }
}

// ---- the operations ----

Work ProcessGroup::all_reduce_async(Tensor& t, ReduceOp op) {
  check_reducible(t, "all_reduce");
  return issue("all_reduce", t.nbytes(), {t}, [this, t, op]() mutable {
    if (!comm_) return;
    Tensor buffer = reduction_buffer(t);
    WEFT_CHECK(buffer.numel() <= INT_MAX, ValueError, "all_reduce: ", buffer.numel(), " elements; at most ", INT_MAX);
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr(), static_cast<int>(buffer.numel()), mpi_type(buffer.dtype()),
                            mpi_op(op), comm_->comm),
              "MPI_Allreduce");
    if (op == ReduceOp::avg) divide(buffer, size_);
    if (buffer.data_ptr() != t.data_ptr()) t.copy_(buffer);
  });
}

Work ProcessGroup::all_reduce_async(Tensor& t, ReduceOp op, DType wire) {
  check_reducible(t, "all_reduce");
  WEFT_CHECK(wire == DType::bf16 || wire == DType::f16, DTypeError, "all_reduce: compresses to bf16 or f16, got ",
             dtype_name(wire));
  WEFT_CHECK(op != ReduceOp::max, ValueError, "all_reduce: a compressed all-reduce sums or averages, not max");
  WEFT_CHECK(t.numel() <= INT_MAX, ValueError, "all_reduce: ", t.numel(), " elements; at most ", INT_MAX);
  return issue("all_reduce", t.numel() * 2, {t}, [this, t, op, wire]() mutable {
    if (!comm_) return;
    Tensor packed = Tensor::empty(t.shape(), wire).copy_(t);
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, packed.data_ptr(), static_cast<int>(packed.numel()), MPI_UINT16_T,
                            sum_16_bit(wire), comm_->comm),
              "MPI_Allreduce");
    if (op == ReduceOp::sum) {
      t.copy_(packed);
      return;
    }
    Tensor sum = Tensor::empty(t.shape(), DType::f32).copy_(packed);
    divide(sum, size_);
    t.copy_(sum);
  });
}

Work ProcessGroup::reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op) {
  check_reducible(input, "reduce_scatter");
  check_reducible(output, "reduce_scatter");
  WEFT_CHECK(input.dtype() == output.dtype(), DTypeError, "reduce_scatter: input is ", dtype_name(input.dtype()),
             " but output is ", dtype_name(output.dtype()));
  WEFT_CHECK(input.numel() == output.numel() * size_, ShapeError, "reduce_scatter: input of ", input.numel(),
             " elements for an output of ", output.numel(), " over ", size_, " ranks; the input must hold ",
             output.numel() * size_);
  return issue("reduce_scatter", input.nbytes(), {input, output}, [this, input, output, op]() mutable {
    if (!comm_) {
      output.copy_(input.reshape(output.shape()));
      return;
    }
    Tensor in = reduction_buffer(input);
    Tensor out = reduction_buffer(output);
    WEFT_CHECK(out.numel() <= INT_MAX, ValueError, "reduce_scatter: ", out.numel(), " elements per rank; at most ", INT_MAX);
    mpi_check(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), static_cast<int>(out.numel()), mpi_type(in.dtype()),
                                       mpi_op(op), comm_->comm),
              "MPI_Reduce_scatter_block");
    if (op == ReduceOp::avg) divide(out, size_);
    if (out.data_ptr() != output.data_ptr()) output.copy_(out);
  });
}

Work ProcessGroup::all_gather_async(const Tensor& input, Tensor& output) {
  check_tensor(input, "all_gather");
  check_tensor(output, "all_gather");
  WEFT_CHECK(input.dtype() == output.dtype(), DTypeError, "all_gather: input is ", dtype_name(input.dtype()),
             " but output is ", dtype_name(output.dtype()));
  WEFT_CHECK(output.numel() == input.numel() * size_, ShapeError, "all_gather: output of ", output.numel(),
             " elements for an input of ", input.numel(), " over ", size_, " ranks; the output must hold ",
             input.numel() * size_);
  const int bytes = byte_count(input, "all_gather");
  return issue("all_gather", output.nbytes(), {input, output}, [this, input, output, bytes]() mutable {
    if (!comm_) {
      output.copy_(input.reshape(output.shape()));
      return;
    }
    // ZeRO gathers a flat buffer whose own slice is already in place: MPI_IN_PLACE then.
    const bool in_place = input.data_ptr() == static_cast<char*>(output.data_ptr()) + int64_t{bytes} * rank_;
    mpi_check(MPI_Allgather(in_place ? MPI_IN_PLACE : input.data_ptr(), bytes, MPI_BYTE, output.data_ptr(), bytes,
                            MPI_BYTE, comm_->comm),
              "MPI_Allgather");
  });
}

Work ProcessGroup::broadcast_async(Tensor& t, int root) {
  check_tensor(t, "broadcast");
  WEFT_CHECK(root >= 0 && root < size_, IndexError, "broadcast: root ", root, " is not a rank of this group of ", size_);
  const int bytes = byte_count(t, "broadcast");
  return issue("broadcast", t.nbytes(), {t}, [this, t, root, bytes]() mutable {
    if (comm_) mpi_check(MPI_Bcast(t.data_ptr(), bytes, MPI_BYTE, root, comm_->comm), "MPI_Bcast");
  });
}

Work ProcessGroup::barrier_async() {
  return issue("barrier", 0, {}, [this] {
    if (comm_) mpi_check(MPI_Barrier(comm_->comm), "MPI_Barrier");
  });
}

Work ProcessGroup::send_async(const Tensor& t, int to, int tag) {
  check_tensor(t, "send");
  WEFT_CHECK(to >= 0 && to < size_ && to != rank_, IndexError, "send: rank ", to, " is not another rank of this group of ",
             size_, " (this is rank ", rank_, ")");
  WEFT_CHECK(tag >= 0, ValueError, "send: tag must be >= 0, got ", tag);
  const int bytes = byte_count(t, "send");
  return issue("send", t.nbytes(), {t}, [this, t, to, tag, bytes] {
    mpi_check(MPI_Send(t.data_ptr(), bytes, MPI_BYTE, to, tag, comm_->comm), "MPI_Send");
  });
}

Work ProcessGroup::recv_async(Tensor& t, int from, int tag) {
  check_tensor(t, "recv");
  WEFT_CHECK(from >= 0 && from < size_ && from != rank_, IndexError, "recv: rank ", from,
             " is not another rank of this group of ", size_, " (this is rank ", rank_, ")");
  WEFT_CHECK(tag >= 0, ValueError, "recv: tag must be >= 0, got ", tag);
  const int bytes = byte_count(t, "recv");
  return issue("recv", t.nbytes(), {t}, [this, t, from, tag, bytes]() mutable {
    // The message's size first: one of another size is received whole (and dropped) and refused,
    // rather than cut short or overrunning t.
    MPI_Status probe;
    mpi_check(MPI_Probe(from, tag, comm_->comm, &probe), "MPI_Probe");
    int incoming = 0;
    MPI_Get_count(&probe, MPI_BYTE, &incoming);
    if (incoming != bytes) {
      std::vector<char> dropped(static_cast<size_t>(incoming));
      MPI_Recv(dropped.data(), incoming, MPI_BYTE, from, tag, comm_->comm, MPI_STATUS_IGNORE);
      throw ShapeError(str("recv: rank ", from, " sent ", incoming, " bytes with tag ", tag, ", but the tensor ",
                           dtype_name(t.dtype()), " ", shape_str(t.shape()), " holds ", bytes));
    }
    mpi_check(MPI_Recv(t.data_ptr(), bytes, MPI_BYTE, from, tag, comm_->comm, MPI_STATUS_IGNORE), "MPI_Recv");
  });
}

Work ProcessGroup::send_recv_async(const Tensor& out, int to, Tensor& in, int from, int tag) {
  check_tensor(out, "send_recv");
  check_tensor(in, "send_recv");
  WEFT_CHECK(to >= 0 && to < size_ && to != rank_ && from >= 0 && from < size_ && from != rank_, IndexError,
             "send_recv: ranks ", to, " and ", from, " must be other ranks of this group of ", size_, " (this is rank ",
             rank_, ")");
  WEFT_CHECK(tag >= 0, ValueError, "send_recv: tag must be >= 0, got ", tag);
  const int out_bytes = byte_count(out, "send_recv"), in_bytes = byte_count(in, "send_recv");
  return issue("send_recv", out.nbytes() + in.nbytes(), {out, in}, [this, out, to, in, from, tag, out_bytes, in_bytes]() mutable {
    MPI_Status status;
    mpi_check(MPI_Sendrecv(out.data_ptr(), out_bytes, MPI_BYTE, to, tag, in.data_ptr(), in_bytes, MPI_BYTE, from, tag,
                           comm_->comm, &status),
              "MPI_Sendrecv");
    int received = 0;
    MPI_Get_count(&status, MPI_BYTE, &received);
    WEFT_CHECK(received == in_bytes, ShapeError, "send_recv: rank ", from, " sent ", received, " bytes, but the tensor ",
               dtype_name(in.dtype()), " ", shape_str(in.shape()), " holds ", in_bytes);
  });
}

// ---- Ring-AllReduce ----
//
// n ranks in a ring, each sending to the next and receiving from the previous; the buffer in n
// chunks. Reduce-scatter: in step s (0 .. n-2) rank r sends chunk (r - s) mod n and adds the chunk
// (r - s - 1) mod n it receives into its own; after n - 1 steps rank r holds chunk (r + 1) mod n
// reduced over every rank. All-gather: in step s it sends chunk (r + 1 - s) mod n and receives chunk
// (r - s) mod n in place. Each rank sends 2 (n - 1) / n of the buffer in all, whatever n: the
// bandwidth-optimal all-reduce. Pipelining: a step's chunk travels in segments, the next
// segment's receive posted before the current one is added, so adding overlaps the transfer.
namespace {

constexpr int64_t kRingSegmentBytes = int64_t{1} << 20;

template <typename T>
void ring(T* data, int64_t n, ReduceOp op, int rank, int size, MPI_Comm comm) {
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  auto chunk_begin = [&](int c) { return n * c / size; };
  auto chunk_size = [&](int c) { return chunk_begin(c + 1) - chunk_begin(c); };
  const int64_t segment = std::max<int64_t>(1, kRingSegmentBytes / static_cast<int64_t>(sizeof(T)));
  const MPI_Datatype type = sizeof(T) == 8 ? MPI_DOUBLE : MPI_FLOAT;
  std::vector<T> incoming[2] = {std::vector<T>(static_cast<size_t>(std::min(segment, n))),
                                std::vector<T>(static_cast<size_t>(std::min(segment, n)))};
  // One step: send chunk `out` whole (in segments) and receive chunk `in`, adding it (reduce) or
  // writing it in place (gather).
  auto step = [&](int out, int in, bool reduce, int tag) {
    std::vector<MPI_Request> sends;
    for (int64_t at = 0; at < chunk_size(out); at += segment) {
      sends.emplace_back();
      mpi_check(MPI_Isend(data + chunk_begin(out) + at, static_cast<int>(std::min(segment, chunk_size(out) - at)), type,
                          next, tag, comm, &sends.back()),
                "MPI_Isend");
    }
    const int64_t total = chunk_size(in);
    T* target = data + chunk_begin(in);
    auto post = [&](int64_t at, MPI_Request* request) {
      T* into = reduce ? incoming[(at / segment) % 2].data() : target + at;
      mpi_check(MPI_Irecv(into, static_cast<int>(std::min(segment, total - at)), type, prev, tag, comm, request), "MPI_Irecv");
    };
    MPI_Request pending = MPI_REQUEST_NULL;
    if (total > 0) post(0, &pending);
    for (int64_t at = 0; at < total; at += segment) {
      mpi_check(MPI_Wait(&pending, MPI_STATUS_IGNORE), "MPI_Wait");
      if (at + segment < total) post(at + segment, &pending);
      if (reduce) combine(target + at, incoming[(at / segment) % 2].data(), std::min(segment, total - at), op);
    }
    mpi_check(MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  };
  for (int s = 0; s < size - 1; ++s) step((rank - s + size) % size, (rank - s - 1 + 2 * size) % size, true, s);
  if (op == ReduceOp::avg) divide(data + chunk_begin((rank + 1) % size), chunk_size((rank + 1) % size), size);
  for (int s = 0; s < size - 1; ++s)
    step((rank + 1 - s + size) % size, (rank - s + size) % size, false, size + s);
}

}  // namespace

Work ProcessGroup::ring_all_reduce_async(Tensor& t, ReduceOp op) {
  check_reducible(t, "ring_all_reduce");
  return issue("ring_all_reduce", t.nbytes(), {t}, [this, t, op]() mutable {
    if (!comm_) return;
    Tensor buffer = reduction_buffer(t);
    if (buffer.dtype() == DType::f64) ring(buffer.data<double>(), buffer.numel(), op, rank_, size_, comm_->ring);
    else ring(buffer.data<float>(), buffer.numel(), op, rank_, size_, comm_->ring);
    if (buffer.data_ptr() != t.data_ptr()) t.copy_(buffer);
  });
}

}  // namespace weft::dist
