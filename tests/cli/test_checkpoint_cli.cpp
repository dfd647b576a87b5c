// `weft train` killed (SIGKILL, as kill -9) at a write, fsync or rename of a checkpoint save:
// `--resume` from what is left finishes with the same weights as a run never killed, and the
// save after the kill removes what the killed one left. Its logs (metrics.jsonl, TensorBoard) hold
// every step once, as the unkilled run's do.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "weft/core/error.h"
#include "weft/io/atomic_file.h"
#include "weft/io/tensorboard.h"
#include "weft_cli.h"

namespace weft::testing {
namespace {

// `text` with each atomic write's temporary name ("x.tmp.12345.y": it names the process) made
// "x.tmp.PID.y", so that two runs' messages compare.
std::string without_pids(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t digits = i + 5;
    if (text.compare(i, 5, ".tmp.") == 0)
      while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    if (digits > i + 5 && digits < text.size() && text[digits] == '.') {
      out += ".tmp.PID";
      i = digits;
    } else {
      out += text[i++];
    }
  }
  return out;
}

namespace fs = std::filesystem;

// What a run's logs say, less timings and allocator bytes: each metrics.jsonl record's step and
// losses, and each TensorBoard point's tag, step and value, as TensorBoard reads the directory.
std::vector<std::string> logged(const std::string& dir) {
  std::vector<std::string> records;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    records.push_back(str("jsonl ", record["step"], " ", record.value("train/loss", 0.0), " ", record.value("val/loss", 0.0)));
  }
  std::vector<std::string> points;
  for (const io::ScalarEvent& e : io::read_run_events(dir).scalars)
    if (!e.tag.ends_with("_per_s") && !e.tag.starts_with("memory/")) points.push_back(str("event ", e.tag, " ", e.step, " ", e.value));
  std::sort(points.begin(), points.end());
  records.insert(records.end(), points.begin(), points.end());
  return records;
}

// A hundred fortunes-style documents: enough text for a tiny GPT's training and validation.
void write_corpus(const std::string& path) {
  std::ofstream text(path);
  for (int i = 0; i < 100; ++i) text << "line " << i << " of a small corpus about the sea\n%\n";
}

// `weft train FLAGS` killed at every 4th operation of its saves in turn: what is left resumes to the
// weights and logs of a run never killed, and no leftover survives the resumed run. `kills` gets
// the kills' lines ("injected kill at operation N (what path)").
void expect_every_kill_loses_nothing(const std::string& flags, std::vector<std::string>& kills) {
  TempDir dir;
  write_corpus(dir.file("text.txt"));
  // Two checkpoints, at steps 2 and 4.
  const std::string train = "train --model gpt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --steps 4 "
                            "--eval-every 2 --log-every 1 --threads 1 " + flags + " --data " + dir.file("text.txt") +
                            " --out ";
  Outcome straight = weft_cli(train + dir.file("straight"));
  ASSERT_EQ(straight.status, 0) << straight.output;
  const std::string expected = io::read_file(dir.file("straight/model.safetensors"));
  const std::vector<std::string> expected_log = logged(dir.file("straight"));
  ASSERT_EQ(expected_log.front().substr(0, 8), "jsonl 1 ");

  for (int n = 1;; n += 4) {
    const std::string out = dir.file("killed-" + std::to_string(n));
    ::setenv("WEFT_FAULT_AT", (std::to_string(n) + ":kill").c_str(), 1);
    Outcome killed = weft_cli(train + out);
    ::unsetenv("WEFT_FAULT_AT");
    if (killed.status == 0) break;  // past the last operation of the last save
    const size_t line = killed.output.find("injected kill at operation " + std::to_string(n) + " ");
    ASSERT_NE(line, std::string::npos) << killed.output;
    kills.push_back(killed.output.substr(line, killed.output.find('\n', line) - line));
    // Killed in the first save, there is nothing to resume; after it, there is step 2 or 4.
    const bool resumable = fs::is_symlink(out + "/latest");
    Outcome resumed = weft_cli(train + out + (resumable ? " --resume " + out : " --overwrite"));
    ASSERT_EQ(resumed.status, 0) << "killed at operation " << n << ": " << resumed.output;
    EXPECT_EQ(io::read_file(out + "/model.safetensors"), expected) << "killed at operation " << n;
    EXPECT_EQ(logged(out), expected_log) << "killed at operation " << n;
    for (const auto& entry : fs::directory_iterator(out)) {
      const std::string name = entry.path().filename().string();
      const bool leftover = name.starts_with(".tmp") || contains(name, ".tmp.") ||
                            (name.starts_with("step-") && name != "step-00000004");
      EXPECT_FALSE(leftover) << "killed at operation " << n << ", left " << name;
    }
  }
  EXPECT_GT(kills.size(), 10u) << "both saves' operations are reached";
}

TEST(CheckpointCli, AKilledSaveResumesToTheWeightsOfARunNeverKilled) {
  std::vector<std::string> kills;
  expect_every_kill_loses_nothing("", kills);
}

// --async-save: the kills land in the thread that writes the checkpoint while the steps after it
// run, and lose nothing either.
TEST(CheckpointCli, AKilledBackgroundSaveResumesToTheWeightsOfARunNeverKilled) {
  std::vector<std::string> kills;
  expect_every_kill_loses_nothing("--async-save", kills);
  int in_background = 0;
  for (const std::string& kill : kills)
    in_background += contains(kill, "model.safetensors") || contains(kill, "optimizer.safetensors");
  EXPECT_GT(in_background, 3) << "the model's and optimizer's files are written in the background";
}

// A save failing (ENOSPC) at any operation, in the background or not, ends the run alike: exit
// status 2, the same one line on stderr (a save later, for a background save), and the same
// checkpoint current.
TEST(CheckpointCli, AFailedBackgroundSaveEndsTheRunAsABlockingOneDoes) {
  TempDir dir;
  write_corpus(dir.file("text.txt"));
  const std::string out = dir.file("run");
  const std::string train = "train --model gpt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --steps 4 "
                            "--eval-every 2 --log-every 1 --threads 1 --data " + dir.file("text.txt") + " --out " + out;
  int in_background = 0, n = 1;
  for (;; n += 2) {
    Outcome outcomes[2];
    std::string current[2];
    for (int background : {0, 1}) {
      fs::remove_all(out);
      ::setenv("WEFT_FAULT_AT", std::to_string(n).c_str(), 1);
      outcomes[background] = weft_cli(train + (background ? " --async-save" : ""), dir.file("stdout"));
      ::unsetenv("WEFT_FAULT_AT");
      current[background] = fs::is_symlink(out + "/latest") ? fs::read_symlink(out + "/latest").string() : "";
    }
    if (outcomes[0].status == 0) break;  // past the last operation of the last save
    SCOPED_TRACE("failed at operation " + std::to_string(n));
    EXPECT_EQ(outcomes[0].status, 2) << outcomes[0].output;
    EXPECT_EQ(outcomes[1].status, 2) << outcomes[1].output;
    EXPECT_TRUE(contains(outcomes[0].output, "No space left on device")) << outcomes[0].output;
    EXPECT_EQ(without_pids(outcomes[1].output), without_pids(outcomes[0].output));
    EXPECT_EQ(current[1], current[0]);
    in_background +=
        contains(outcomes[0].output, "model.safetensors") || contains(outcomes[0].output, "optimizer.safetensors");
  }
  EXPECT_GT(n, 20) << "both saves' operations are reached";
  EXPECT_GT(in_background, 3) << "the files the thread writes";
}

// Starts `weft args` with its output in `log`, returning its pid.
// `shell` runs first in the shell that execs weft (a trap, say).
pid_t start_weft(const std::string& args, const std::string& log, const std::string& shell = "") {
  const std::string command = shell + "exec " + std::string(WEFT_CLI_PATH) + " " + args + " >" + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    // weft takes SIGHUP only where it was not ignored: a suite run under nohup (or a runner that
    // ignores hangups) would hand its weft an ignored one. The shell cannot reset what it was
    // started ignoring, so this process does.
    signal(SIGHUP, SIG_DFL);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int records_in(const std::string& metrics) {
  std::ifstream in(metrics);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

// A preemption notice (SIGTERM), Ctrl-C (SIGINT) or a hangup (SIGHUP) mid-run of `weft train
// FLAGS`: the step in flight finishes, the checkpoint is written, weft exits 0 naming it, and
// --resume ends with the weights and logs of a run never stopped.
void expect_a_signal_stops_after_the_step(const std::string& flags, const std::vector<int>& signals) {
  TempDir dir;
  write_corpus(dir.file("text.txt"));
  // A constant learning rate: the stopped run planned more steps than the runs it is compared with.
  const std::string train = "train --model gpt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 "
                            "--schedule constant --log-every 1 --threads 1 " + flags + " --data " +
                            dir.file("text.txt") + " --json";
  for (int signal : signals) {
    const std::string name = signal == SIGTERM ? "SIGTERM" : signal == SIGINT ? "SIGINT" : "SIGHUP";
    const std::string out = dir.file("stopped-" + name);
    const pid_t pid = start_weft(train + " --steps 1000000 --out " + out, dir.file(name + ".log"));
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (records_in(out + "/metrics.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(kill(pid, signal), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    const std::string output = io::read_file(dir.file(name + ".log"));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << name << ": " << output;
    EXPECT_TRUE(contains(output, name + ": stopped after step ")) << output;
    EXPECT_TRUE(contains(output, "checkpoint in " + out + " (continue with " WEFT_CLI_PATH " train --resume " + out + ")"))
        << output;
    const nlohmann::json stopped = last_line_json(output);
    EXPECT_EQ(stopped["stopped_by"], name);
    const int64_t steps = stopped["steps"].get<int64_t>() + 3;
    ASSERT_GE(steps, 6);

    Outcome resumed = weft_cli(train + " --steps " + std::to_string(steps) + " --out " + out + " --resume " + out);
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    EXPECT_EQ(last_line_json(resumed.output)["stopped_by"], "");
    const std::string straight = dir.file("straight-" + name);
    ASSERT_EQ(weft_cli(train + " --steps " + std::to_string(steps) + " --out " + straight).status, 0);
    EXPECT_EQ(io::read_file(out + "/model.safetensors"), io::read_file(straight + "/model.safetensors")) << name;
    EXPECT_EQ(logged(out), logged(straight)) << name;
  }
}

TEST(CheckpointCli, ASignalStopsAfterTheStepAndResumeContinuesExactly) {
  expect_a_signal_stops_after_the_step("", {SIGTERM, SIGINT, SIGHUP});
}

// --async-save with a save every other step: the signal's save waits for the one in flight, and
// the run ends once its own is written.
TEST(CheckpointCli, ASignalStopsABackgroundSavingRunAndResumeContinuesExactly) {
  expect_a_signal_stops_after_the_step("--async-save --eval-every 2", {SIGTERM, SIGINT});
}

// Started under nohup (SIGHUP ignored), a run outlives its terminal: a hangup changes nothing.
TEST(CheckpointCli, UnderNohupAHangupIsIgnored) {
  TempDir dir;
  const std::string out = dir.file("run");
  const pid_t pid = start_weft("train --model mlp --steps 1000000 --eval-every 0 --log-every 1 --threads 1 --out " + out,
                               dir.file("log"), "trap '' HUP; ");
  ASSERT_GT(pid, 0);
  auto wait_for_records = [&](int64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (records_in(out + "/metrics.jsonl") < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return records_in(out + "/metrics.jsonl");
  };
  const int64_t before = wait_for_records(2);
  ASSERT_EQ(kill(pid, SIGHUP), 0);
  EXPECT_GE(wait_for_records(before + 5), before + 5) << "training stopped after the hangup";
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string output = io::read_file(dir.file("log"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_TRUE(contains(output, "SIGTERM: stopped after step ")) << output;
}

// oneDNN's f32 GEMM kernels point the stack pointer into the heap while they run, so a signal
// handled on a thread inside one writes its frame over the heap (oneDNN issue #4845; mpirun's
// SIGTERM crashed ranks so). In a running `weft train`, every thread but the one that waits for
// them blocks SIGTERM, SIGINT and SIGHUP: the kernels' threads (OpenMP's included) never take them.
TEST(CheckpointCli, OnlyOneThreadTakesTheStopSignals) {
  TempDir dir;
  const std::string out = dir.file("run");
  const pid_t pid = start_weft("train --model mlp --steps 1000000 --eval-every 0 --log-every 1 --threads 2 --out " + out,
                               dir.file("log"));
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (records_in(out + "/metrics.jsonl") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const uint64_t stop_signals =
      (uint64_t{1} << (SIGTERM - 1)) | (uint64_t{1} << (SIGINT - 1)) | (uint64_t{1} << (SIGHUP - 1));
  int threads = 0, taking = 0;
  for (const auto& task : fs::directory_iterator(str("/proc/", pid, "/task"))) {
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigBlk:", 0) != 0) continue;
      ++threads;
      if ((std::stoull(line.substr(7), nullptr, 16) & stop_signals) != stop_signals) ++taking;
    }
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << io::read_file(dir.file("log"));
  EXPECT_GE(threads, 3);  // main, OpenMP's second, the waiter
  EXPECT_EQ(taking, 1) << "of " << threads << " threads";
}

}  // namespace
}  // namespace weft::testing
