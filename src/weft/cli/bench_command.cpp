// `weft bench comm`: collective bandwidth, as nccl-tests measures it, under mpirun. For each size
// from --min-bytes to --max-bytes (doubling), each op's time per call (the slowest rank's mean over
// --iters calls after --warmup), its algorithm bandwidth (bytes / time) and bus bandwidth, the rate
// each link must carry, which compares across world sizes: all-reduce 2 (n - 1) / n x algbw,
// all-gather and reduce-scatter (n - 1) / n x algbw. Bytes are the whole buffer: all-reduce's
// tensor, all-gather's output, reduce-scatter's input. All-reduce runs twice per size: MPI's own
// MPI_Allreduce and weft's Ring-AllReduce on send/recv (dist/process_group.h). f32 elements.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/allocator.h"
#include "weft/dist/process_group.h"
#include "weft/dist/world.h"

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
             "; run it under MPI: mpirun -np 2 weft bench comm");
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

}  // namespace

void add_bench_command(CLI::App& app, std::function<void()>& run) {
  CLI::App* bench = app.add_subcommand("bench", "measure the machine: comm (collectives between MPI ranks)");
  bench->require_subcommand(1);
  auto o = std::make_shared<CommOptions>();
  auto byte_flag = [&](CLI::App* command, const std::string& flag, int64_t& target, const std::string& help) {
    command->add_option_function<std::string>(
        flag,
        [flag, &target](const std::string& text) {
          int64_t bytes = 0;
          try {
            bytes = parse_bytes(text);
          } catch (const ValueError&) {  // refused below, in the flags' format
          }
          WEFT_CHECK(bytes > 0, ValueError, flag, ": must be a positive byte count such as 8, 1e6 or 256MiB, got '",
                     text, "'");
          target = bytes;
        },
        help);
  };
  CLI::App* comm = bench->add_subcommand(
      "comm", "all-reduce (MPI's and weft's ring), all-gather and reduce-scatter bandwidth by size, as nccl-tests; "
              "run under mpirun -np N");
  comm->add_option("--ops", o->ops, "comma-separated: allreduce, allgather, reducescatter")->capture_default_str();
  byte_flag(comm, "--min-bytes", o->min_bytes, "the smallest buffer (default 8)");
  byte_flag(comm, "--max-bytes", o->max_bytes, "the largest buffer (default 256MiB)");
  number_flag(comm, "--iters", o->iters, "calls timed per size (default: about 1 GiB's worth, 5 to 200)");
  number_flag(comm, "--warmup", o->warmup, "untimed calls first");
  comm->add_flag("--json", o->json, "print one JSON object (its rows) instead of the table");
  comm->callback([&run, o] {
    check_flag("--min-bytes", o->min_bytes, {.min = 4, .max = int64_t{1} << 31});
    check_flag("--max-bytes", o->max_bytes, {.min = o->min_bytes, .max = int64_t{1} << 31});
    check_flag("--iters", o->iters, {.min = 0, .max = 1000000});
    check_flag("--warmup", o->warmup, {.min = 0, .max = 1000000});
    run = [o] { bench_comm(*o); };
  });
}

}  // namespace weft::cli
