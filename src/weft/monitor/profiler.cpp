#include "weft/monitor/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "weft/core/allocator.h"
#include "weft/io/atomic_file.h"

namespace weft::monitor {

namespace detail {
std::atomic<Observer*> observer{nullptr};
}

void attach(Observer* o) {
  Observer* expected = nullptr;
  if (o == nullptr) {
    detail::observer.store(nullptr, std::memory_order_release);
    return;
  }
  WEFT_CHECK(detail::observer.compare_exchange_strong(expected, o, std::memory_order_acq_rel) || expected == o,
             ValueError, "monitor::attach: another observer (a profiler?) is already attached; stop it first");
}

double bytes_of(TensorRefs tensors) {
  double total = 0;
  for (const Tensor& t : tensors)
    if (t.defined()) total += static_cast<double>(t.nbytes());
  return total;
}

double bytes_of(const std::vector<Tensor>& tensors) {
  double total = 0;
  for (const Tensor& t : tensors)
    if (t.defined()) total += static_cast<double>(t.nbytes());
  return total;
}

template <typename T>
void Scope::open(Observer* o, ScopeKind kind, const char* name, const T* inputs, size_t n) {
  OpInputs info;
  bool have_float = false;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    if (info.shapes.empty() || (!have_float && is_floating(t.dtype()))) info.dtype = t.dtype();
    have_float = have_float || is_floating(t.dtype());
    info.shapes.push_back(t.shape());
  }
  id_ = o->begin(kind, name, std::move(info));
  observer_ = o;
}

template void Scope::open(Observer*, ScopeKind, const char*, const std::reference_wrapper<const Tensor>*, size_t);
template void Scope::open(Observer*, ScopeKind, const char*, const Tensor*, size_t);

void Scope::close() {
  // An observer detached since this scope opened has already closed it.
  if (observer() == observer_) observer_->end(id_, flops_, bytes_);
}

namespace {

// Small thread numbers in order of first use, for the trace's tid.
int this_thread_id() {
  static std::atomic<int> next{1};
  thread_local int id = next++;
  return id;
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* kind_name(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::op: return "op";
    case ScopeKind::backward: return "backward";
    case ScopeKind::module: return "module";
    case ScopeKind::phase: return "phase";
  }
  return "?";
}

double us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace

Profiler::Profiler() : origin_ns_(steady_ns()) {}

Profiler::~Profiler() {
  if (running()) stop();
}

int64_t Profiler::now_ns() const { return steady_ns() - origin_ns_; }

void Profiler::start() {
  {
    std::lock_guard lock(mutex_);
    if (main_tid_ == 0) main_tid_ = this_thread_id();
    sample_memory_locked(now_ns());
  }
  attach(this);
  CachingAllocator::time_calls(true);
}

void Profiler::stop() {
  if (running()) {
    CachingAllocator::time_calls(false);
    attach(nullptr);
  }
  std::lock_guard lock(mutex_);
  const int64_t t = now_ns();
  const int tid_here = this_thread_id();
  for (auto& [tid, stack] : open_)
    while (!stack.empty())
      close_locked(stack.back(), t, tid == tid_here ? CachingAllocator::thread_call_ns() : -1, 0, 0, false);
  sample_memory_locked(t);
}

uint64_t Profiler::begin(ScopeKind kind, std::string_view name, OpInputs inputs) {
  const int tid = this_thread_id();
  std::lock_guard lock(mutex_);
  const int64_t t = now_ns();
  std::vector<size_t>& stack = open_[tid];
  Event e;
  e.name = name;
  if (kind == ScopeKind::backward) e.name += "_backward";
  e.kind = kind;
  e.tid = tid;
  e.depth = static_cast<int>(stack.size());
  e.begin_ns = t;
  e.alloc_ns = -CachingAllocator::thread_call_ns();
  e.inputs = std::move(inputs);
  stack.push_back(events_.size());
  events_.push_back(std::move(e));
  if (kind == ScopeKind::phase) sample_memory_locked(t);
  return stack.back();
}

// Closes `index` and every scope of its thread opened after it; those inner ones are closed by
// their parent (their own close never came, or will come later and find them closed).
void Profiler::close_locked(size_t index, int64_t end_ns, int64_t alloc_ns, double flops, double bytes,
                            bool by_parent) {
  Event& e = events_[index];
  std::vector<size_t>& stack = open_[e.tid];
  auto at = std::find(stack.begin(), stack.end(), index);
  if (at == stack.end()) return;
  while (stack.back() != index) close_locked(stack.back(), end_ns, alloc_ns, 0, 0, true);
  stack.pop_back();
  e.end_ns = end_ns;
  e.alloc_ns = alloc_ns >= 0 ? e.alloc_ns + alloc_ns : 0;
  e.flops = flops;
  e.bytes = bytes;
  e.closed_by_parent = by_parent;
  if (!stack.empty()) {
    events_[stack.back()].child_ns += end_ns - e.begin_ns;
    events_[stack.back()].child_alloc_ns += e.alloc_ns;
  }
}

void Profiler::end(uint64_t id, double flops, double bytes) {
  const int tid = this_thread_id();
  const int64_t alloc_ns = CachingAllocator::thread_call_ns();
  std::lock_guard lock(mutex_);
  if (id >= events_.size() || events_[id].end_ns >= 0) return;
  const int64_t t = now_ns();
  close_locked(id, t, events_[id].tid == tid ? alloc_ns : -1, flops, bytes, false);
  sample_memory_locked(t);
}

void Profiler::end_innermost(ScopeKind kind) {
  const int tid = this_thread_id();
  const int64_t alloc_ns = CachingAllocator::thread_call_ns();
  std::lock_guard lock(mutex_);
  const std::vector<size_t>& stack = open_[tid];
  auto it = std::find_if(stack.rbegin(), stack.rend(), [&](size_t i) { return events_[i].kind == kind; });
  if (it != stack.rend()) close_locked(*it, now_ns(), alloc_ns, 0, 0, false);
}

// One sample per change, so a trace of many small ops does not repeat the same two numbers.
void Profiler::sample_memory_locked(int64_t ts_ns) {
  const MemoryStats s = CachingAllocator::cpu().stats();
  if (!memory_.empty() && memory_.back().allocated_bytes == s.allocated_bytes &&
      memory_.back().reserved_bytes == s.reserved_bytes)
    return;
  memory_.push_back({ts_ns, s.allocated_bytes, s.reserved_bytes});
}

std::vector<Profiler::Event> Profiler::events() const {
  std::lock_guard lock(mutex_);
  return {events_.begin(), events_.end()};
}

double Profiler::step_ms() const {
  std::lock_guard lock(mutex_);
  int64_t total = 0;
  for (const Event& e : events_)
    if (e.tid == main_tid_ && e.depth == 0 && e.end_ns >= 0) total += e.end_ns - e.begin_ns;
  return static_cast<double>(total) / 1e6;
}

nlohmann::json Profiler::trace() const {
  using nlohmann::json;
  std::lock_guard lock(mutex_);
  const int pid = static_cast<int>(::getpid());
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"ts", 0}, {"pid", pid}, {"tid", 0},
                    {"args", {{"name", "weft"}}}});
  std::map<int, bool> tids;
  for (const Event& e : events_) tids[e.tid] = true;
  for (const auto& [tid, unused] : tids)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"ts", 0}, {"pid", pid}, {"tid", tid},
                      {"args", {{"name", tid == main_tid_ ? std::string("main") : "thread " + std::to_string(tid)}}}});
  for (const Event& e : events_) {
    if (e.end_ns < 0) continue;
    json args = json::object();
    if (e.kind == ScopeKind::op || e.kind == ScopeKind::backward) {
      args["shapes"] = e.inputs.shapes;
      args["dtype"] = dtype_name(e.inputs.dtype);
      args["flops"] = e.flops;
      args["bytes"] = e.bytes;
    }
    if (e.closed_by_parent) args["closed_by"] = "the enclosing scope (its end was never reported)";
    events.push_back({{"ph", "X"}, {"name", e.name}, {"cat", kind_name(e.kind)}, {"ts", us(e.begin_ns)},
                      {"dur", us(e.end_ns - e.begin_ns)}, {"pid", pid}, {"tid", e.tid}, {"args", args}});
  }
  for (const MemorySample& m : memory_)
    events.push_back({{"ph", "C"}, {"name", "memory"}, {"ts", us(m.ts_ns)}, {"pid", pid}, {"tid", main_tid_},
                      {"args", {{"allocated", m.allocated_bytes}, {"reserved", m.reserved_bytes}}}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void Profiler::write_trace(const std::string& path) const {
  const std::string text = trace().dump();
  io::write_file_atomic(path, [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
}

std::vector<OpStats> Profiler::key_averages(const Roofline& roofline) const {
  const double step = step_ms();
  std::map<std::string, OpStats> by_name;
  {
    std::lock_guard lock(mutex_);
    for (const Event& e : events_) {
      if ((e.kind != ScopeKind::op && e.kind != ScopeKind::backward) || e.end_ns < 0) continue;
      OpStats& s = by_name[e.name];
      s.name = e.name;
      ++s.calls;
      s.total_ms += static_cast<double>(e.end_ns - e.begin_ns) / 1e6;
      s.self_ms += static_cast<double>(e.end_ns - e.begin_ns - e.child_ns) / 1e6;
      s.flops += e.flops;
      s.bytes += e.bytes;
    }
  }
  std::vector<OpStats> rows;
  const double ridge = roofline.bandwidth_gbs > 0 ? roofline.peak_gflops / roofline.bandwidth_gbs : 0;
  for (auto& [name, s] : by_name) {
    s.share = step > 0 ? s.self_ms / step : 0;
    s.gflops_per_s = s.self_ms > 0 ? s.flops / (s.self_ms * 1e6) : 0;
    s.gbytes_per_s = s.self_ms > 0 ? s.bytes / (s.self_ms * 1e6) : 0;
    s.intensity = s.bytes > 0 ? s.flops / s.bytes : 0;
    if (s.bytes > 0 && ridge > 0) {
      s.bound = s.intensity >= ridge ? "compute" : "memory";
      s.roof_share = s.flops > 0 ? s.gflops_per_s / std::min(roofline.peak_gflops, s.intensity * roofline.bandwidth_gbs)
                                 : s.gbytes_per_s / roofline.bandwidth_gbs;
    }
    rows.push_back(s);
  }
  std::sort(rows.begin(), rows.end(), [](const OpStats& a, const OpStats& b) { return a.self_ms > b.self_ms; });
  return rows;
}

std::string Profiler::table(const std::vector<OpStats>& rows, const Roofline& roofline, size_t max_rows) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-34s %7s %10s %10s %7s %9s %8s %8s  %s\n", "op", "calls", "self ms", "total ms",
                "step %", "GFLOP/s", "GB/s", "FLOP/B", "bound (achieved / roof)");
  out += line;
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const OpStats& r = rows[i];
    std::string bound = r.bound.empty() ? "-" : r.bound;
    if (!r.bound.empty()) bound += " (" + std::to_string(static_cast<int>(r.roof_share * 100 + 0.5)) + "%)";
    std::snprintf(line, sizeof line, "%-34.34s %7lld %10.3f %10.3f %6.1f%% %9.2f %8.2f %8.2f  %s\n", r.name.c_str(),
                  static_cast<long long>(r.calls), r.self_ms, r.total_ms, r.share * 100, r.gflops_per_s, r.gbytes_per_s,
                  r.intensity, bound.c_str());
    out += line;
  }
  if (rows.size() > max_rows)
    out += "(" + std::to_string(rows.size() - max_rows) + " more ops, smaller self time)\n";
  if (roofline.peak_gflops > 0 && roofline.bandwidth_gbs > 0) {
    std::snprintf(line, sizeof line, "roofline: %.1f GFLOP/s peak GEMM, %.1f GB/s memory; ridge %.2f FLOP/B\n",
                  roofline.peak_gflops, roofline.bandwidth_gbs, roofline.peak_gflops / roofline.bandwidth_gbs);
    out += line;
  }
  return out;
}

nlohmann::json Profiler::to_json(const std::vector<OpStats>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const OpStats& r : rows)
    out.push_back({{"name", r.name},       {"calls", r.calls},       {"self_ms", r.self_ms},
                   {"total_ms", r.total_ms}, {"share", r.share},     {"flops", r.flops},
                   {"bytes", r.bytes},     {"gflops_per_s", r.gflops_per_s}, {"gbytes_per_s", r.gbytes_per_s},
                   {"intensity", r.intensity},
                   {"bound", r.bound},     {"roof_share", r.roof_share}});
  return out;
}

namespace {

std::string format_family_row(const char* name, const char* calls, const char* ms, const char* share) {
  char line[128];
  std::snprintf(line, sizeof line, "%-18s %8s %11s %7s\n", name, calls, ms, share);
  return line;
}

}  // namespace

const char* op_family(std::string_view name) {
  constexpr std::string_view kBackward = "_backward";
  if (name.ends_with(kBackward)) name.remove_suffix(kBackward.size());
  const OpInfo* op = find_op(name);
  return op ? op->family : "other";
}

std::vector<FamilyStats> Profiler::family_breakdown() const {
  std::map<std::string, FamilyStats> by_family;
  int64_t step_ns = 0, allocator_ns = 0, framework_ns = 0;
  {
    std::lock_guard lock(mutex_);
    for (const Event& e : events_) {
      if (e.tid != main_tid_ || e.end_ns < 0) continue;
      const int64_t self_ns = e.end_ns - e.begin_ns - e.child_ns - (e.alloc_ns - e.child_alloc_ns);
      if (e.depth == 0) {
        step_ns += e.end_ns - e.begin_ns;
        allocator_ns += e.alloc_ns;
      }
      if (e.kind != ScopeKind::op && e.kind != ScopeKind::backward) {
        framework_ns += self_ns;
        continue;
      }
      FamilyStats& f = by_family[op_family(e.name)];
      ++f.calls;
      f.ms += static_cast<double>(self_ns) / 1e6;
    }
  }
  by_family["allocator"].ms += static_cast<double>(allocator_ns) / 1e6;
  by_family["framework"].ms += static_cast<double>(framework_ns) / 1e6;
  std::vector<FamilyStats> rows;
  for (auto& [name, f] : by_family) {
    f.family = name;
    f.share = step_ns > 0 ? f.ms * 1e6 / static_cast<double>(step_ns) : 0;
    rows.push_back(f);
  }
  std::sort(rows.begin(), rows.end(), [](const FamilyStats& a, const FamilyStats& b) { return a.ms > b.ms; });
  return rows;
}

std::string Profiler::family_table(const std::vector<FamilyStats>& rows) {
  std::string out = format_family_row("family", "calls", "ms", "step %");
  for (const FamilyStats& r : rows) {
    char calls[32], ms[32], share[32];
    std::snprintf(calls, sizeof calls, "%lld", static_cast<long long>(r.calls));
    std::snprintf(ms, sizeof ms, "%.3f", r.ms);
    std::snprintf(share, sizeof share, "%.1f%%", r.share * 100);
    out += format_family_row(r.family.c_str(), r.calls > 0 ? calls : "-", ms, share);
  }
  return out;
}

nlohmann::json Profiler::to_json(const std::vector<FamilyStats>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const FamilyStats& r : rows)
    out.push_back({{"family", r.family}, {"calls", r.calls}, {"ms", r.ms}, {"share", r.share}});
  return out;
}

}  // namespace weft::monitor
