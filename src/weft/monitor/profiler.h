// The op seam, and the profiler that observes it.
//
// Every differentiable op opens an OpScope when it starts (its name and inputs; its FLOPs and
// bytes moved once its outputs exist); the autograd engine opens a backward scope around every
// node's backward; an optimizer opens one per step (all its parameters, one fused pass); the
// trainer opens PhaseScopes (step, forward, backward, optimizer), and module forward hooks call
// begin_module / end_module.
// Each scope reports to the process's one Observer, if one is attached. With none attached a
// scope costs one atomic load and a branch: no clock read, no allocation, no string; an op
// computes its FLOPs and bytes only under `if (scope.active())`.
//
// Invariants: per thread, scopes close in the reverse order they opened. Op and phase scopes are
// RAII; a module scope is opened and closed by separate calls (a pre- and a post-hook), and one
// left open by a forward that threw is closed by the first enclosing scope that closes, at that
// moment, so a trace stays properly nested. An observer sees the close only of scopes it saw open.
// Attach and detach observers between steps: a scope on another thread still open when its
// observer is destroyed would call a dead object.
//
// The Profiler records scopes between start() and stop(): a Chrome trace (the trace event format
// Perfetto and chrome://tracing read) of complete events per thread with the allocator's
// allocated and reserved bytes as a counter track, and a key-averages table like torch.profiler's,
// judged against a roofline (peak GFLOP/s, bandwidth GB/s) the caller measures
// (kernels/cpu/roofline.h) and passes in.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "weft/core/tensor.h"
#include "weft/monitor/op_table.h"

namespace weft::monitor {

enum class ScopeKind : uint8_t {
  op,        // an op's forward (or an optimizer's update of one parameter)
  backward,  // an autograd node's backward; shown as "<op>_backward"
  module,    // a module's forward, between its pre- and post-hook
  phase,     // a part of a step the trainer names: "step", "forward", "backward", "optimizer"
};

// What an observer is told about an op's inputs (empty for modules and phases).
struct OpInputs {
  std::vector<Shape> shapes;  // of the defined inputs, in order
  DType dtype = DType::f32;   // of the first floating-point input (else the first input)
};

class Observer {
 public:
  virtual ~Observer() = default;
  // Opens a scope on the calling thread; the id it returns goes to end().
  virtual uint64_t begin(ScopeKind kind, std::string_view name, OpInputs inputs) = 0;
  // Closes scope `id`, and first any scope opened inside it that is still open; nothing when
  // `id` is already closed.
  virtual void end(uint64_t id, double flops, double bytes) = 0;
  // Closes the calling thread's innermost open scope of `kind` (and any opened inside it).
  virtual void end_innermost(ScopeKind kind) = 0;
};

namespace detail {
extern std::atomic<Observer*> observer;
}

// The attached observer, or null. Acquire pairs with attach()'s release (a plain load on x86).
inline Observer* observer() { return detail::observer.load(std::memory_order_acquire); }
// Attaches `o` (null detaches). Throws if another observer is attached.
void attach(Observer* o);

using TensorRefs = std::initializer_list<std::reference_wrapper<const Tensor>>;

// Bytes of the defined tensors' elements (a view counts its elements, not its storage).
double bytes_of(TensorRefs tensors);
double bytes_of(const std::vector<Tensor>& tensors);

class Scope {
 public:
  // `name` is a C string so that, with no observer, not even its length is computed.
  Scope(ScopeKind kind, const char* name, TensorRefs inputs = {}) {
    if (Observer* o = observer()) [[unlikely]]
      open(o, kind, name, inputs.begin(), inputs.size());
  }
  Scope(ScopeKind kind, const char* name, const std::vector<Tensor>& inputs) {
    if (Observer* o = observer()) [[unlikely]]
      open(o, kind, name, inputs.data(), inputs.size());
  }
  ~Scope() {
    if (observer_) [[unlikely]]
      close();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  bool active() const { return observer_ != nullptr; }
  // The op's arithmetic and the bytes it reads and writes; call only when active().
  void set_cost(double flops, double bytes) {
    flops_ = flops;
    bytes_ = bytes;
  }

 private:
  template <typename T>
  void open(Observer* o, ScopeKind kind, const char* name, const T* inputs, size_t n);
  void close();

  Observer* observer_ = nullptr;
  uint64_t id_ = 0;
  double flops_ = 0, bytes_ = 0;
};

struct OpScope : Scope {
  OpScope(Op op, TensorRefs inputs) : Scope(ScopeKind::op, op_name(op), inputs), op_(op) {}
  OpScope(Op op, const std::vector<Tensor>& inputs) : Scope(ScopeKind::op, op_name(op), inputs), op_(op) {}

  // The op table's FLOPs per element times counted's elements, and the bytes of `moved` (each
  // tensor read or written, as often as it is); call only when active().
  void set_cost_per_element(const Tensor& counted, TensorRefs moved) {
    set_cost(op_info(op_).flops_per_element * static_cast<double>(counted.numel()), bytes_of(moved));
  }

 private:
  Op op_;
};

struct PhaseScope : Scope {
  explicit PhaseScope(const char* name) : Scope(ScopeKind::phase, name) {}
};

// For a module's pre- and post-hook: end_module closes the innermost open module scope.
inline void begin_module(std::string_view name) {
  if (Observer* o = observer()) [[unlikely]]
    o->begin(ScopeKind::module, name, {});
}
inline void end_module() {
  if (Observer* o = observer()) [[unlikely]]
    o->end_innermost(ScopeKind::module);
}

// This machine's ceilings, for judging ops: an op whose FLOPs per byte is below
// peak_gflops / bandwidth_gbs (the ridge point) is memory-bound, above it compute-bound.
struct Roofline {
  double peak_gflops = 0;    // 0: unknown, the table says no bound
  double bandwidth_gbs = 0;
};

// One row of the key averages: every scope of one op name (op and backward scopes).
struct OpStats {
  std::string name;
  int64_t calls = 0;
  double self_ms = 0;   // time in the op itself, not in ops it opened inside
  double total_ms = 0;  // time from open to close
  double share = 0;     // self_ms / the profiled step time
  double flops = 0, bytes = 0;
  double gflops_per_s = 0;  // flops / self time
  double gbytes_per_s = 0;  // bytes / self time
  double intensity = 0;     // flops / bytes
  // "compute" or "memory" (intensity above or below the ridge; an op that moves bytes and does no
  // arithmetic is memory-bound), "" when it moves nothing or there is no roofline.
  std::string bound;
  // Achieved over attainable: GFLOP/s over min(peak, intensity * bandwidth); for an op with no
  // FLOPs, GB/s over the bandwidth.
  double roof_share = 0;
};

// Where a step's time went, by kind of work: every op and backward scope falls in one op family
// (GEMM, attention, normalisation, …; the op table names it), the caching allocator's calls
// are their own row, and "framework" is the rest of the step: time inside the trainer's phases
// and the modules' scopes but in no op (autograd's bookkeeping, hooks, dispatch).
struct FamilyStats {
  std::string family;
  int64_t calls = 0;  // op and backward scopes (allocator calls and framework: 0)
  double ms = 0;      // self time net of the allocator calls made inside it
  double share = 0;   // ms / the profiled step time
};

// The family of op `name` (a backward scope's "_backward" suffix ignored), from the op table
// (monitor/op_table.h): "GEMM", "convolution", "attention", "normalisation", "elementwise",
// "pooling", "embedding", "cross-entropy", "optimizer", "casts", "copies and views",
// "quantization"; "other" for a name that is no op's.
const char* op_family(std::string_view name);

class Profiler : public Observer {
 public:
  // One recorded scope. Times in ns from the profiler's construction; end_ns = -1 while open.
  struct Event {
    std::string name;  // as shown: a backward scope's op name + "_backward"
    ScopeKind kind = ScopeKind::op;
    int tid = 0;
    int depth = 0;  // scopes open around it on its thread when it opened
    int64_t begin_ns = 0, end_ns = -1;
    int64_t child_ns = 0;  // time in the scopes directly inside this one
    // Time in allocator calls made during the scope on its thread, and during the scopes
    // directly inside it (0 when the scope was closed from another thread by stop()).
    int64_t alloc_ns = 0, child_alloc_ns = 0;
    OpInputs inputs;
    double flops = 0, bytes = 0;
    bool closed_by_parent = false;  // a module scope whose post-hook never ran
  };
  struct MemorySample {
    int64_t ts_ns = 0, allocated_bytes = 0, reserved_bytes = 0;
  };

  Profiler();
  ~Profiler() override;  // stops if running

  void start();  // attaches this profiler; events accumulate over start / stop pairs
  void stop();   // detaches; closes scopes still open on any thread
  bool running() const { return observer() == this; }

  std::vector<Event> events() const;
  // The time the profiled steps took: the sum of the outermost scopes' durations on the thread
  // that called start() (the step scopes, when the trainer opens one per step).
  double step_ms() const;

  // Chrome trace event format: "X" complete events (ts and dur in µs, args: shapes, dtype,
  // flops, bytes), "C" counter events for the allocator, "M" process and thread names.
  nlohmann::json trace() const;
  void write_trace(const std::string& path) const;  // atomically

  // Op and backward scopes grouped by name, by self time, descending.
  std::vector<OpStats> key_averages(const Roofline& roofline = {}) const;
  static std::string table(const std::vector<OpStats>& rows, const Roofline& roofline, size_t max_rows = 20);
  static nlohmann::json to_json(const std::vector<OpStats>& rows);

  // The profiled steps' time by op family, then "allocator" and "framework", by time descending;
  // the rows add up to step_ms().
  std::vector<FamilyStats> family_breakdown() const;
  static std::string family_table(const std::vector<FamilyStats>& rows);
  static nlohmann::json to_json(const std::vector<FamilyStats>& rows);

  uint64_t begin(ScopeKind kind, std::string_view name, OpInputs inputs) override;
  void end(uint64_t id, double flops, double bytes) override;
  void end_innermost(ScopeKind kind) override;

 private:
  int64_t now_ns() const;
  // alloc_ns: the closing thread's CachingAllocator::thread_call_ns(), or -1 when that is not
  // the scope's thread.
  void close_locked(size_t index, int64_t end_ns, int64_t alloc_ns, double flops, double bytes, bool by_parent);
  void sample_memory_locked(int64_t ts_ns);

  mutable std::mutex mutex_;
  int64_t origin_ns_;
  int main_tid_ = 0;
  std::deque<Event> events_;  // a deque: growing never moves the events recorded so far
  std::unordered_map<int, std::vector<size_t>> open_;  // per thread: indices of open scopes, outermost first
  std::vector<MemorySample> memory_;
};

}  // namespace weft::monitor
