// `weft bench comm`: collective bandwidth, as nccl-tests measures it, under mpirun. For each size
// from --min-bytes to --max-bytes (doubling), each op's time per call (the slowest rank's mean over
// --iters calls after --warmup), its algorithm bandwidth (bytes / time) and bus bandwidth, the rate
// each link must carry, which compares across world sizes: all-reduce 2 (n - 1) / n x algbw,
// all-gather and reduce-scatter (n - 1) / n x algbw. Bytes are the whole buffer: all-reduce's
// tensor, all-gather's output, reduce-scatter's input. All-reduce runs twice per size: MPI's own
// MPI_Allreduce and weft's Ring-AllReduce on send/recv (dist/process_group.h). f32 elements.
//
// `weft bench hierarchy`: the memory hierarchy measured (monitor/hierarchy.h): latency and read
// bandwidth by working set, the levels found beside the OS's cache sizes, and the hierarchy table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/program.h"
#include "weft/core/allocator.h"
#include "weft/dist/process_group.h"
#include "weft/dist/world.h"
#include "weft/io/input_file.h"
#include "weft/monitor/hierarchy.h"

namespace weft::cli {

namespace {

struct CommOptions {
  std::string ops = "allreduce,allgather,reducescatter";
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t iters = 0;  // 0: enough calls for about 1 GiB per size, 5 to 200
  int64_t warmup = 2;
  bool json = false;
};

struct Row {
  std::string op, impl;
  int64_t bytes;
  double time_us, algbw_gbps, busbw_gbps;
};

// The slowest rank's mean seconds per call of `call`.
double time_per_call(dist::ProcessGroup& group, int64_t iters, int64_t warmup, const std::function<void()>& call) {
  for (int64_t i = 0; i < warmup; ++i) call();
  group.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) call();
  Tensor seconds = Tensor::scalar(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters,
                                  DType::f64);
  group.all_reduce(seconds, dist::ReduceOp::max);
  return seconds.item();
}

void bench_comm(const CommOptions& o) {
  dist::ProcessGroup& group = dist::ProcessGroup::world();
  const int n = group.size();
  WEFT_CHECK(n >= 2, ValueError, "weft bench comm: measures collectives between ranks, and this is ",
             dist::launched_by_mpi() ? "a launch of 1 rank" : "a single process",
             "; run it under MPI: mpirun -np 2 ", shell_quote(program_name()), " bench comm");
  std::vector<std::string> ops;
  std::stringstream list(o.ops);
  for (std::string op; std::getline(list, op, ',');) {
    WEFT_CHECK(op == "allreduce" || op == "allgather" || op == "reducescatter", ValueError,
               "--ops: each must be allreduce, allgather or reducescatter, got '", op, "'");
    ops.push_back(op);
  }
  std::vector<Row> rows;
  const bool print = group.rank() == 0;
  const double bus_share = static_cast<double>(n - 1) / n;
  if (print && !o.json)
    std::printf("weft bench comm: %d ranks, f32; time: the slowest rank's mean per call; busbw: all-reduce "
                "2(n-1)/n x algbw, all-gather and reduce-scatter (n-1)/n x algbw\n",
                n);
  for (const std::string& op : ops) {
    if (print && !o.json) {
      std::printf("\n%s\n%12s %8s", op.c_str(), "bytes", "iters");
      for (const char* impl : op == "allreduce" ? std::vector<const char*>{"MPI", "ring"} : std::vector<const char*>{"MPI"})
        std::printf(" | %5s %11s %9s %9s", impl, "time us", "algbw GB/s", "busbw GB/s");
      std::printf("\n");
    }
    for (int64_t requested = o.min_bytes; requested <= o.max_bytes; requested *= 2) {
      // Whole f32 elements, and for the ops that cut the buffer, as many per rank.
      const int64_t per = op == "allreduce" ? 1 : n;
      const int64_t count = std::max<int64_t>(per, (requested / 4 + per - 1) / per * per);
      const int64_t bytes = count * 4;
      const int64_t iters = o.iters > 0 ? o.iters : std::clamp<int64_t>((int64_t{1} << 30) / bytes, 5, 200);
      Tensor whole = Tensor::ones({count}), part = Tensor::ones({count / per});
      std::vector<Row> line;
      auto add = [&](const char* impl, double seconds, double bus_factor) {
        const double algbw = static_cast<double>(bytes) / seconds / 1e9;
        line.push_back({op, impl, bytes, seconds * 1e6, algbw, algbw * bus_factor});
      };
      if (op == "allreduce") {
        add("mpi", time_per_call(group, iters, o.warmup, [&] { group.all_reduce(whole, dist::ReduceOp::sum); }),
            2 * bus_share);
        add("ring", time_per_call(group, iters, o.warmup, [&] { group.ring_all_reduce(whole, dist::ReduceOp::sum); }),
            2 * bus_share);
      } else if (op == "allgather") {
        add("mpi", time_per_call(group, iters, o.warmup, [&] { group.all_gather(part, whole); }), bus_share);
      } else {
        add("mpi", time_per_call(group, iters, o.warmup,
                                 [&] { group.reduce_scatter(whole, part, dist::ReduceOp::sum); }),
            bus_share);
      }
      if (print && !o.json) {
        std::printf("%12lld %8lld", static_cast<long long>(bytes), static_cast<long long>(iters));
        for (const Row& r : line) std::printf(" | %5s %11.1f %10.2f %10.2f", "", r.time_us, r.algbw_gbps, r.busbw_gbps);
        std::printf("\n");
        std::fflush(stdout);
      }
      rows.insert(rows.end(), line.begin(), line.end());
      if (requested > o.max_bytes / 2) break;
    }
  }
  if (print && o.json) {
    nlohmann::json out = {{"ranks", n}, {"dtype", "f32"}, {"rows", nlohmann::json::array()}};
    for (const Row& r : rows)
      out["rows"].push_back({{"op", r.op}, {"impl", r.impl}, {"bytes", r.bytes}, {"time_us", r.time_us},
                             {"algbw_gbps", r.algbw_gbps}, {"busbw_gbps", r.busbw_gbps}});
    std::cout << out.dump() << "\n";
  }
}

struct HierarchyCliOptions {
  monitor::HierarchyOptions measure;
  bool json = false;
};

// 4096 -> "4 KiB", 266240 KiB -> "260 MiB"; a size that is no whole number of its largest unit as
// format_bytes has it.
std::string size_text(int64_t bytes) {
  for (auto [shift, unit] : {std::pair{30, "GiB"}, std::pair{20, "MiB"}, std::pair{10, "KiB"}}) {
    if (bytes < int64_t{1} << shift) continue;
    if (bytes % (int64_t{1} << shift) != 0) break;
    return std::to_string(bytes >> shift) + " " + unit;
  }
  return format_bytes(bytes);
}

nlohmann::json point_json(const monitor::HierarchyPoint& p) {
  return {{"bytes", p.bytes}, {"latency_ns", p.latency_ns}, {"latency_cycles", p.latency_cycles},
          {"read_gbps", p.read_gbps}};
}

void bench_hierarchy(const HierarchyCliOptions& o) {
  const std::string cache_dir = "/sys/devices/system/cpu/cpu0/cache";
  const monitor::ClockRates clock = monitor::clock_rates();
  const std::vector<monitor::OsCache> caches = monitor::os_caches(cache_dir);
  if (!o.json) {
    std::printf("weft bench hierarchy: one thread. latency: each load's address is the previous load's value, "
                "around a random cycle of 64-byte lines; read: the working set in order, 64-byte vectors. "
                "Best of %d repeats.\n",
                o.measure.quick ? 2 : 3);
    std::printf("cycles: core clock %.2f GHz, timed on dependent additions (one cycle each); the time-stamp counter "
                "runs at %.2f GHz (/proc/cpuinfo)\n\n",
                clock.core_hz / 1e9, clock.tsc_hz / 1e9);
    std::printf("%12s %11s %8s %10s\n", "working set", "latency ns", "cycles", "read GB/s");
    std::fflush(stdout);
  }
  const std::vector<monitor::HierarchyPoint> points =
      monitor::measure_hierarchy(o.measure, clock.core_hz, [&o](const monitor::HierarchyPoint& p) {
        if (o.json) return;
        std::printf("%12s %11.2f %8.1f %10.1f\n", size_text(p.bytes).c_str(), p.latency_ns, p.latency_cycles,
                    p.read_gbps);
        std::fflush(stdout);
      });
  const std::vector<monitor::HierarchyLevel> levels = monitor::detect_levels(points, caches);
  if (o.json) {
    nlohmann::json out = {{"core_hz", clock.core_hz},
                          {"tsc_hz", clock.tsc_hz},
                          {"sizes", nlohmann::json::array()},
                          {"os_caches", nlohmann::json::array()},
                          {"levels", nlohmann::json::array()}};
    for (const auto& p : points) out["sizes"].push_back(point_json(p));
    for (const auto& c : caches) out["os_caches"].push_back({{"level", c.level}, {"type", c.type}, {"bytes", c.bytes}});
    for (const auto& l : levels)
      out["levels"].push_back({{"name", l.name},
                               {"smallest_bytes", l.smallest_bytes},
                               {"largest_bytes", l.largest_bytes},
                               {"os_bytes", l.os_bytes},
                               {"typical", point_json(l.typical)}});
    std::cout << out.dump() << "\n";
    return;
  }
  std::printf("\nlevels, where the latency steps up, beside the caches the OS reports (%s):\n", cache_dir.c_str());
  std::printf("%6s %12s %10s %11s %8s %10s\n", "level", "fits up to", "OS size", "latency ns", "cycles", "read GB/s");
  for (const auto& l : levels)
    std::printf("%6s %12s %10s %11.2f %8.1f %10.1f\n", l.name.c_str(), size_text(l.largest_bytes).c_str(),
                l.os_bytes > 0 ? size_text(l.os_bytes).c_str() : "-", l.typical.latency_ns, l.typical.latency_cycles,
                l.typical.read_gbps);
  std::printf("\nthe memory hierarchy of this machine (size: the OS's; figures: each level's middle working set):\n");
  std::printf("%-10s %10s %12s %8s %10s\n", "level", "size", "latency ns", "cycles", "read GB/s");
  std::printf("%-10s %10s %12.2f %8d %10s\n", "registers", size_text(monitor::register_file_bytes()).c_str(),
              1e9 / clock.core_hz, 1, "-");
  auto print_level = [](const monitor::HierarchyLevel& l) {
    const int64_t size =
        l.name == "RAM" ? monitor::physical_memory_bytes() : l.os_bytes > 0 ? l.os_bytes : l.largest_bytes;
    std::printf("%-10s %10s %12.2f %8.1f %10.1f\n", l.name.c_str(), size_text(size).c_str(), l.typical.latency_ns,
                l.typical.latency_cycles, l.typical.read_gbps);
  };
  auto latency_at = [&points](int64_t bytes) {
    return std::find_if(points.begin(), points.end(), [bytes](const auto& p) { return p.bytes == bytes; })->latency_ns;
  };
  // Levels in the OS's order; a cache the curve shows no plateau for gets a row saying so, and
  // beneath the table how the latency climbs across where it would be.
  std::vector<std::string> unseen;
  size_t next = 0;
  for (const monitor::OsCache& cache : caches) {
    const std::string name = "L" + std::to_string(cache.level);
    if (next < levels.size() && levels[next].name == name) {
      print_level(levels[next++]);
      continue;
    }
    std::printf("%-10s %10s %12s %8s %10s\n", name.c_str(), size_text(cache.bytes).c_str(), "no plateau", "-", "-");
    if (next == 0 || next == levels.size()) continue;
    const int64_t from = levels[next - 1].largest_bytes, to = levels[next].smallest_bytes;
    char line[200];
    std::snprintf(line, sizeof line, "%s: no plateau; from %s to %s the latency climbs from %.1f to %.1f ns",
                  name.c_str(), size_text(from).c_str(), size_text(to).c_str(), latency_at(from), latency_at(to));
    unseen.push_back(line);
  }
  for (; next < levels.size(); ++next) print_level(levels[next]);
  for (const std::string& line : unseen) std::printf("%s\n", line.c_str());
}

}  // namespace

void add_bench_command(CLI::App& app, std::function<void()>& run) {
  CLI::App* bench = app.add_subcommand(
      "bench", "measure the machine: comm (collectives between MPI ranks), hierarchy (caches' and RAM's latency and "
               "bandwidth)");
  bench->require_subcommand(1);
  auto o = std::make_shared<CommOptions>();
  // A byte count up to `max` (`why` says where that bound comes from), refused with the text typed.
  auto byte_flag = [&](CLI::App* command, const std::string& flag, int64_t& target, const std::string& help,
                       int64_t max, const std::string& why) {
    command->add_option_function<std::string>(
        flag,
        [flag, &target, max, why](const std::string& text) {
          int64_t bytes = 0;
          try {
            bytes = parse_bytes(text);
          } catch (const ValueError&) {  // refused below, in the flags' format
          }
          WEFT_CHECK(bytes > 0 && bytes <= max, ValueError, flag, ": must be a positive byte count such as 8, 1e6 or "
                     "256MiB, at most ", format_bytes(max), why, ", got '", text, "'");
          target = bytes;
        },
        help);
  };
  constexpr int64_t kMaxMessage = int64_t{1} << 31;  // MPI counts a message's bytes in an int
  CLI::App* comm = bench->add_subcommand(
      "comm", "all-reduce (MPI's and weft's ring), all-gather and reduce-scatter bandwidth by size, as nccl-tests; "
              "run under mpirun -np N");
  comm->add_option("--ops", o->ops, "comma-separated: allreduce, allgather, reducescatter")->capture_default_str();
  byte_flag(comm, "--min-bytes", o->min_bytes, "the smallest buffer (default 8)", kMaxMessage, "");
  byte_flag(comm, "--max-bytes", o->max_bytes, "the largest buffer (default 256MiB)", kMaxMessage, "");
  number_flag(comm, "--iters", o->iters, "calls timed per size (0: about 1 GiB's worth, 5 to 200)");
  number_flag(comm, "--warmup", o->warmup, "untimed calls first");
  comm->add_flag("--json", o->json, "print one JSON object (its rows) instead of the table");
  comm->callback([&run, o] {
    check_flag("--min-bytes", o->min_bytes, {.min = 4});
    check_flag("--max-bytes", o->max_bytes, {.min = o->min_bytes});
    check_flag("--iters", o->iters, {.min = 0, .max = 1000000});
    check_flag("--warmup", o->warmup, {.min = 0, .max = 1000000});
    run = [o] { bench_comm(*o); };
  });
  auto h = std::make_shared<HierarchyCliOptions>();
  CLI::App* hierarchy = bench->add_subcommand(
      "hierarchy", "the memory hierarchy measured: load latency (pointer chasing) and read bandwidth for working sets "
                   "from 4 KiB to --max-bytes, the levels found beside the OS's cache sizes");
  // The working set is one buffer of --max-bytes: half the machine's memory leaves the rest to the
  // OS and what else runs, and 16 GiB already takes minutes to measure.
  const int64_t half_memory = static_cast<int64_t>(std::min<uint64_t>(io::usable_memory_bytes(), INT64_MAX)) / 2, max_working_set = std::min(int64_t{16} << 30, half_memory);
  byte_flag(hierarchy, "--max-bytes", h->measure.max_bytes, "the largest working set (default 1GiB)", max_working_set,
            max_working_set == half_memory ? str(", half of this machine's ", format_bytes(2 * half_memory), " of memory")
                                           : std::string());
  hierarchy->add_flag("--quick", h->measure.quick, "fewer loads and repeats: rough figures, quickly");
  hierarchy->add_flag("--json", h->json, "print one JSON object (sizes, OS caches, levels) instead of the tables");
  hierarchy->callback([&run, h] {
    check_flag("--max-bytes", h->measure.max_bytes, {.min = h->measure.min_bytes});
    run = [h] { bench_hierarchy(*h); };
  });
}

}  // namespace weft::cli
