#include "weft/monitor/profiler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "weft/autograd/autocast_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/nn/gpt.h"
#include "weft/nn/models.h"
#include "weft/ops/arith.h"
#include "weft/ops/activation.h"
#include "weft/ops/conv.h"
#include "weft/ops/pool.h"
#include "weft/ops/linear.h"
#include "weft/ops/loss.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/optim/clip.h"
#include "weft/optim/sgd.h"

using namespace weft;
using monitor::Profiler;
using monitor::ScopeKind;

namespace {

std::vector<Profiler::Event> named(const Profiler& p, const std::string& name) {
  std::vector<Profiler::Event> out;
  for (const Profiler::Event& e : p.events())
    if (e.name == name) out.push_back(e);
  return out;
}

// Counts what it is told, to check the seam itself.
struct CountingObserver : monitor::Observer {
  int begins = 0, ends = 0;
  uint64_t begin(ScopeKind, std::string_view, monitor::OpInputs) override { return ++begins; }
  void end(uint64_t, double, double) override { ++ends; }
  void end_innermost(ScopeKind) override { ++ends; }
};

// One MLP training step in the trainer's phases: step { forward, backward, optimizer }.
struct MlpStep {
  std::shared_ptr<nn::Sequential> model = nn::make_mlp();
  optim::AdamW optimizer{model->parameters()};
  Tensor x, y;
  explicit MlpStep(int64_t batch) {
    Generator gen(0);
    x = Tensor::randn({batch, 1, 28, 28}, gen);
    std::vector<double> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<double>(i % 10);
    y = Tensor::from_vector(labels, {batch}, DType::i64);
  }
  void run() {
    monitor::PhaseScope step("step");
    Tensor loss;
    {
      monitor::PhaseScope phase("forward");
      loss = cross_entropy((*model)(x), y);
    }
    {
      monitor::PhaseScope phase("backward");
      loss.backward();
    }
    monitor::PhaseScope phase("optimizer");
    optimizer.step();
    optimizer.zero_grad();
  }
};

}  // namespace

TEST(Profiler, NothingIsRecordedWithoutAnObserver) {
  Profiler profiler;
  ASSERT_EQ(monitor::observer(), nullptr);
  Tensor a = Tensor::ones({4, 4}).requires_grad_(true);
  sum(matmul(a, a), {}, false).backward();
  EXPECT_TRUE(profiler.events().empty());

  CountingObserver counter;
  monitor::attach(&counter);
  sum(matmul(a, a), {}, false).backward();
  monitor::attach(nullptr);
  EXPECT_GT(counter.begins, 0);
  EXPECT_EQ(counter.begins, counter.ends);
  const int seen = counter.begins;
  sum(matmul(a, a), {}, false).backward();
  EXPECT_EQ(counter.begins, seen);
}

TEST(Profiler, OnlyOneObserverAtATime) {
  Profiler first, second;
  first.start();
  EXPECT_THROW(second.start(), ValueError);
  first.stop();
  second.start();
  EXPECT_TRUE(second.running());
  second.stop();
  EXPECT_EQ(monitor::observer(), nullptr);
}

TEST(Profiler, MatmulFlopsAreTwoMNK) {
  const int64_t m = 3, k = 5, n = 7;
  Tensor a = Tensor::ones({m, k}), b = Tensor::ones({k, n});
  Profiler profiler;
  profiler.start();
  matmul(a, b);
  profiler.stop();
  auto events = named(profiler, "matmul");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].flops, 2.0 * m * n * k);
  EXPECT_EQ(events[0].bytes, 4.0 * (m * k + k * n + m * n));
  EXPECT_EQ(events[0].inputs.shapes, (std::vector<Shape>{{m, k}, {k, n}}));
  EXPECT_EQ(events[0].inputs.dtype, DType::f32);
  EXPECT_EQ(events[0].kind, ScopeKind::op);
}

TEST(Profiler, BatchedMatmulCountsEveryBatch) {
  Tensor a = Tensor::ones({2, 3, 4, 5}), b = Tensor::ones({5, 6});
  Profiler profiler;
  profiler.start();
  matmul(a, b);
  profiler.stop();
  EXPECT_EQ(named(profiler, "matmul").at(0).flops, 2.0 * (2 * 3 * 4) * 6 * 5);
}

// linear: 2·rows·in·out for the GEMM plus one add per output element for the bias.
TEST(Profiler, LinearFlopsCountTheGemmAndTheBias) {
  const int64_t rows = 4, in = 6, out = 3;
  Tensor x = Tensor::ones({2, 2, in}), w = Tensor::ones({out, in}), b = Tensor::ones({out});
  Profiler profiler;
  profiler.start();
  linear(x, w, b);
  linear(x, w, {});
  profiler.stop();
  auto events = named(profiler, "linear");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].flops, 2.0 * rows * in * out + rows * out);
  EXPECT_EQ(events[1].flops, 2.0 * rows * in * out);
}

TEST(Profiler, ConvFlopsCountEveryWindowPerGroup) {
  Tensor x = Tensor::ones({2, 4, 8, 8}), w = Tensor::ones({6, 2, 3, 3}), b = Tensor::ones({6});
  Conv2dOptions options;
  options.padding = {1, 1};
  options.groups = 2;
  Profiler profiler;
  profiler.start();
  Tensor out = conv2d(x, w, b, options);
  profiler.stop();
  ASSERT_EQ(out.shape(), (Shape{2, 6, 8, 8}));
  // 2·N·Cout·Hout·Wout·(Cin/groups)·kh·kw, plus the bias.
  EXPECT_EQ(named(profiler, "conv2d").at(0).flops, 2.0 * 2 * 6 * 8 * 8 * 2 * 3 * 3 + 2 * 6 * 8 * 8);
}

TEST(Profiler, BackwardScopesCarryTheGradientGemms) {
  const int64_t m = 8, k = 16, n = 4;
  Generator gen(1);
  Tensor a = Tensor::randn({m, k}, gen).requires_grad_(true), b = Tensor::randn({k, n}, gen).requires_grad_(true);
  Profiler profiler;
  profiler.start();
  sum(matmul(a, b), {}, false).backward();
  profiler.stop();
  auto backward = named(profiler, "matmul_backward");
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_EQ(backward[0].kind, ScopeKind::backward);
  EXPECT_EQ(backward[0].flops, 2 * (2.0 * m * n * k));  // one GEMM for each operand's gradient
  EXPECT_EQ(backward[0].inputs.shapes, (std::vector<Shape>{{m, n}}));
  EXPECT_EQ(named(profiler, "sum_backward").size(), 1u);
  EXPECT_EQ(named(profiler, "accumulate_grad").size(), 2u);
}

TEST(Profiler, TrainingStepRecordsOpsInsidePhasesAndBackwardAndOptimizerScopes) {
  MlpStep step(8);
  Profiler profiler;
  profiler.start();
  step.run();
  profiler.stop();
  std::map<std::string, int> count;
  std::map<std::string, int> depth;
  for (const Profiler::Event& e : profiler.events()) {
    ++count[e.name];
    depth[e.name] = e.depth;
  }
  EXPECT_EQ(count["step"], 1);
  EXPECT_EQ(count["linear"], 3);
  EXPECT_EQ(count["linear_backward"], 3);
  EXPECT_EQ(count["relu_backward"], 2);
  EXPECT_EQ(count["adamw_step"], 1);  // one fused pass over the 6 parameters
  EXPECT_EQ(count["accumulate_grad"], 6);
  double numel = 0;
  for (const Tensor& p : step.model->parameters()) numel += static_cast<double>(p.numel());
  const Profiler::Event update = named(profiler, "adamw_step").at(0);
  EXPECT_EQ(update.flops, 14.0 * numel);  // 13 per element and AdamW's decay, over all of them
  EXPECT_EQ(update.bytes, 7.0 * 4 * numel);
  EXPECT_EQ(depth["forward"], 1);
  EXPECT_EQ(depth["linear"], 2);
  EXPECT_EQ(depth["linear_backward"], 2);
  EXPECT_EQ(depth["adamw_step"], 2);
}

// The Chrome trace event format: every event has ph, ts, pid, tid; complete events have dur and
// nest properly per thread; the allocator is a counter track with timestamps.
TEST(Profiler, TraceFollowsTheTraceEventFormat) {
  MlpStep step(8);
  Profiler profiler;
  profiler.start();
  monitor::begin_module("model");
  step.run();
  monitor::end_module();
  profiler.stop();
  const nlohmann::json trace = nlohmann::json::parse(profiler.trace().dump());
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<int64_t, std::vector<std::pair<double, double>>> spans;  // per tid, X events in file order
  int counters = 0, metadata = 0;
  for (const auto& e : trace["traceEvents"]) {
    for (const char* key : {"ph", "ts", "pid", "tid", "name"}) ASSERT_TRUE(e.contains(key)) << e.dump();
    ASSERT_TRUE(e["ts"].is_number());
    const std::string ph = e["ph"];
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e["dur"].is_number() && e["dur"] >= 0) << e.dump();
      spans[e["tid"]].push_back({e["ts"], e["ts"].get<double>() + e["dur"].get<double>()});
    } else if (ph == "C") {
      ++counters;
      EXPECT_EQ(e["name"], "memory");
      EXPECT_TRUE(e["args"].contains("allocated") && e["args"].contains("reserved"));
    } else {
      ASSERT_EQ(ph, "M");
      ++metadata;
    }
  }
  EXPECT_GT(counters, 1);
  EXPECT_GE(metadata, 2);  // the process and the main thread
  const double slack = 1e-3;  // µs: the rounding of ts + dur
  for (auto& [tid, list] : spans) {
    ASSERT_FALSE(list.empty());
    std::vector<std::pair<double, double>> open;
    for (const auto& [begin, end] : list) {
      ASSERT_TRUE(open.empty() || begin + slack >= open.back().first) << "events out of order on tid " << tid;
      while (!open.empty() && begin + slack >= open.back().second) open.pop_back();
      ASSERT_TRUE(open.empty() || end <= open.back().second + slack)
          << "an event [" << begin << ", " << end << "] overlaps its parent's end " << open.back().second;
      open.push_back({begin, end});
    }
  }
  // The op events carry their shapes, dtype, FLOPs and bytes.
  bool found = false;
  for (const auto& e : trace["traceEvents"])
    if (e["name"] == "linear") {
      EXPECT_EQ(e["cat"], "op");
      EXPECT_EQ(e["args"]["dtype"], "f32");
      EXPECT_EQ(e["args"]["shapes"][1], nlohmann::json({512, 784}));
      EXPECT_GT(e["args"]["flops"].get<double>(), 0);
      found = true;
      break;
    }
  EXPECT_TRUE(found);
}

// A forward that throws never runs its module's post-hook: the enclosing scope closes the module
// scope when it closes, so the trace stays nested, and later scopes are not misplaced inside it.
TEST(Profiler, ModuleScopeLeftOpenByAThrowIsClosedByItsParent) {
  Profiler profiler;
  profiler.start();
  try {
    monitor::PhaseScope phase("forward");
    monitor::begin_module("block");
    monitor::begin_module("block.attn");
    throw ValueError("forward failed");
  } catch (const ValueError&) {
  }
  { monitor::PhaseScope phase("backward"); }
  monitor::end_module();  // a stray post-hook: no module is open, nothing happens
  profiler.stop();
  auto events = profiler.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].name, "block");
  EXPECT_TRUE(events[1].closed_by_parent);
  EXPECT_TRUE(events[2].closed_by_parent);
  EXPECT_EQ(events[1].end_ns, events[0].end_ns);
  EXPECT_EQ(events[2].end_ns, events[0].end_ns);
  EXPECT_EQ(events[3].name, "backward");
  EXPECT_EQ(events[3].depth, 0);
  EXPECT_FALSE(events[3].closed_by_parent);
}

TEST(Profiler, ModuleHooksNestOpsInsideTheModule) {
  Tensor x = Tensor::ones({2, 3}), w = Tensor::ones({4, 3});
  Profiler profiler;
  profiler.start();
  monitor::begin_module("fc");
  linear(x, w, {});
  monitor::end_module();
  profiler.stop();
  auto events = profiler.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ScopeKind::module);
  EXPECT_EQ(events[1].name, "linear");
  EXPECT_EQ(events[1].depth, 1);
  EXPECT_EQ(events[0].child_ns, events[1].end_ns - events[1].begin_ns);
}

TEST(Profiler, KeyAveragesJudgeOpsAgainstTheRoofline) {
  Tensor a = Tensor::ones({64, 64}), b = Tensor::ones({64, 64});
  Profiler profiler;
  profiler.start();
  {
    monitor::PhaseScope step("step");
    for (int i = 0; i < 3; ++i) matmul(a, b);
    add(a, b);
  }
  profiler.stop();
  const monitor::Roofline roofline{10, 10};  // ridge at 1 FLOP/byte
  auto rows = profiler.key_averages(roofline);
  ASSERT_EQ(rows.size(), 2u);
  std::map<std::string, monitor::OpStats> by_name;
  double shares = 0;
  for (const auto& r : rows) {
    by_name[r.name] = r;
    shares += r.share;
  }
  const monitor::OpStats& mm = by_name.at("matmul");
  EXPECT_EQ(mm.calls, 3);
  EXPECT_EQ(mm.flops, 3 * 2.0 * 64 * 64 * 64);
  EXPECT_NEAR(mm.intensity, 2.0 * 64 / (3 * 4), 1e-9);  // 2·n³ FLOPs over 3·n²·4 bytes
  EXPECT_EQ(mm.bound, "compute");
  EXPECT_EQ(by_name.at("add").bound, "memory");  // 1 FLOP per 12 bytes
  EXPECT_NEAR(by_name.at("add").intensity, 1.0 / 12, 1e-12);
  EXPECT_GT(shares, 0);
  EXPECT_LE(shares, 1.0);
  EXPECT_LE(mm.self_ms, mm.total_ms);
  const std::string table = Profiler::table(rows, roofline);
  EXPECT_NE(table.find("matmul"), std::string::npos);
  EXPECT_NE(table.find("GFLOP/s"), std::string::npos);
  EXPECT_NE(table.find("compute"), std::string::npos);
  const nlohmann::json json = Profiler::to_json(rows);
  EXPECT_EQ(json.size(), 2u);
  EXPECT_EQ(json[0]["name"], rows[0].name);
  // No roofline, no verdict.
  EXPECT_EQ(Profiler::table(profiler.key_averages(), {}).find("compute"), std::string::npos);
}

// The phases account for the step, and the step scope for the wall-clock time around it: the scopes
// nest exactly, and the step does enough work (tens of ms) that the scopes' own cost is far below
// the tolerance. The tolerance is wide on the side a preempted thread can push it (time outside a
// scope but inside the clock), since CI runs tests two at a time on two cores under sanitizers.
TEST(Profiler, ProfiledStepMatchesTheStepTime) {
  MlpStep step(1024);
  step.run();  // oneDNN primitives and the allocator's cache warm up unprofiled
  Profiler profiler;
  profiler.start();
  const auto start = std::chrono::steady_clock::now();
  step.run();
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  profiler.stop();
  double step_ms = 0, phases_ms = 0;
  for (const Profiler::Event& e : profiler.events()) {
    const double ms = static_cast<double>(e.end_ns - e.begin_ns) / 1e6;
    if (e.name == "step") step_ms = ms;
    if (e.kind == ScopeKind::phase && e.depth == 1) phases_ms += ms;
  }
  ASSERT_GT(wall_ms, 5.0);
  EXPECT_NEAR(profiler.step_ms(), step_ms, 1e-9);
  EXPECT_LE(phases_ms, step_ms + 1e-9);
  EXPECT_LE(step_ms, wall_ms + 1e-9);
  EXPECT_GT(phases_ms / step_ms, 0.9) << phases_ms << " ms in phases, step " << step_ms << " ms";
  EXPECT_GT(step_ms / wall_ms, 0.9) << step_ms << " ms in the step scope, " << wall_ms << " ms wall";
  double op_self_ms = 0;
  for (const auto& r : profiler.key_averages()) op_self_ms += r.self_ms;
  EXPECT_LE(op_self_ms, step_ms);
  EXPECT_GT(op_self_ms, 0.5 * step_ms);  // the ops, not the bookkeeping, take the step's time
}

TEST(Profiler, FamiliesAddUpToTheStepWithTheAllocatorApart) {
  MlpStep step(256);
  step.run();
  Profiler profiler;
  profiler.start();
  step.run();
  profiler.stop();
  double sum_ms = 0;
  std::map<std::string, monitor::FamilyStats> by_family;
  for (const monitor::FamilyStats& f : profiler.family_breakdown()) {
    sum_ms += f.ms;
    by_family[f.family] = f;
  }
  EXPECT_NEAR(sum_ms, profiler.step_ms(), 1e-6);
  EXPECT_GT(by_family["allocator"].ms, 0);  // a training step allocates its activations
  EXPECT_GE(by_family["framework"].ms, 0);
  EXPECT_EQ(by_family["GEMM"].calls, 6);  // three linears and their backwards
  EXPECT_GT(by_family["GEMM"].ms, by_family["framework"].ms);
  EXPECT_EQ(by_family.count("other"), 0u);
  double op_self_ms = 0;
  for (const auto& r : profiler.key_averages()) op_self_ms += r.self_ms;
  double op_family_ms = sum_ms - by_family["allocator"].ms - by_family["framework"].ms;
  EXPECT_LE(op_family_ms, op_self_ms + 1e-6);  // ops' self time, net of the allocator calls inside them
}

TEST(Profiler, AllocatorCallsAreTimedOnlyWhileAsked) {
  const int64_t before = CachingAllocator::thread_call_ns();
  Tensor::empty({1024}, DType::f32);
  EXPECT_EQ(CachingAllocator::thread_call_ns(), before);
  CachingAllocator::time_calls(true);
  for (int i = 0; i < 100; ++i) Tensor::empty({1024 + i}, DType::f32);
  CachingAllocator::time_calls(false);
  EXPECT_GT(CachingAllocator::thread_call_ns(), before);
}

TEST(Profiler, EveryOpOfTheBuiltInModelsHasAFamily) {
  EXPECT_STREQ(monitor::op_family("linear_backward"), "GEMM");
  EXPECT_STREQ(monitor::op_family("to"), "casts");
  EXPECT_STREQ(monitor::op_family("no_such_op"), "other");
  Profiler profiler;
  profiler.start();
  Generator gen(0);
  {  // the CNN with SGD
    std::shared_ptr<nn::Sequential> model = nn::make_cnn();
    optim::SGD sgd(model->parameters(), 0.1, {.momentum = 0.9});
    Tensor y = Tensor::from_vector(std::vector<double>{1, 2}, {2}, DType::i64);
    cross_entropy((*model)(Tensor::randn({2, 1, 28, 28}, gen)), y).backward();
    sgd.step();
    // Its Sequential runs conv -> relu -> pool fused; each op alone too.
    Tensor x = Tensor::randn({2, 3, 8, 8}, gen);
    x.requires_grad_();
    sum(max_pool2d(relu(conv2d(x, Tensor::randn({4, 3, 3, 3}, gen))), Pool2dOptions{})).backward();
  }
  for (std::optional<DType> precision : {std::optional<DType>{}, std::optional<DType>{DType::bf16}}) {  // GPT, AdamW
    nn::GPT gpt(nn::GPTConfig{.layers = 1, .heads = 2, .dim = 16, .context = 8, .vocab = 32});
    optim::AdamW adamw(gpt.parameters());
    Tensor tokens = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {1, 6}, DType::i64);
    Tensor targets = Tensor::from_vector(std::vector<double>{2, 3, 4, 5, 6, 7}, {6}, DType::i64);
    {
      AutocastGuard autocast(precision);
      Tensor logits = gpt(tokens);
      cross_entropy(logits.reshape({6, 32}), targets).backward();
    }
    optim::clip_grad_norm(gpt.parameters(), 1.0);
    adamw.step();
  }
  profiler.stop();
  std::map<std::string, int> families;
  for (const Profiler::Event& e : profiler.events()) {
    if (e.kind != ScopeKind::op && e.kind != ScopeKind::backward) continue;
    EXPECT_STRNE(monitor::op_family(e.name), "other") << e.name << " has no op family";
    ++families[monitor::op_family(e.name)];
  }
  for (const char* family : {"GEMM", "convolution", "pooling", "attention", "normalisation", "elementwise", "embedding",
                             "cross-entropy", "optimizer", "casts", "copies and views"})
    EXPECT_GT(families[family], 0) << family;
}
