// `weft smi` as a user meets it: a training run shows up with its model, a growing step and its
// allocator's bytes; killed with SIGKILL it disappears (its file is stale), stopped by SIGTERM or
// SIGINT it removes its own file; --watch redraws; bad values are one clear line and exit 2.
// Status files are untrusted: a FIFO, a huge file, escape sequences, a claim on another program's
// process or an absurd time neither hang smi nor reach the terminal.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "monitor/status_of_this_process.h"
#include "weft/core/error.h"
#include "weft/monitor/status_file.h"
#include "weft_cli.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::expect_usage_error;
using testing::last_line_json;
using testing::Outcome;
using testing::weft_cli;
using Clock = std::chrono::steady_clock;

class SmiCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_smi_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::owner_all);
    // Inherited by every weft this test starts: the trainings publish here and smi reads here.
    setenv("WEFT_SMI_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("WEFT_SMI_DIR");
    fs::remove_all(dir_);
  }
  std::string status_file(pid_t pid) const { return (dir_ / (std::to_string(pid) + ".json")).string(); }
  fs::path dir_;
};

// Starts `weft args` with its output discarded, returning its pid.
pid_t start_weft(const std::string& args) {
  const std::string command = "exec " + std::string(WEFT_CLI_PATH) + " " + args + " >/dev/null 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// `pid`'s row of `weft smi --json`, if it lists it.
std::optional<nlohmann::json> smi_row(pid_t pid) {
  const Outcome o = weft_cli("smi --json");
  EXPECT_EQ(o.status, 0) << o.output;
  const nlohmann::json view = last_line_json(o.output);
  for (const nlohmann::json& p : view.at("processes"))
    if (p.at("pid").get<int64_t>() == pid) return p;
  return std::nullopt;
}

// Polls smi until `pid`'s row satisfies `done` (or the deadline passes), returning the last row.
template <typename Done>
std::optional<nlohmann::json> poll_smi(pid_t pid, Done done, std::chrono::seconds within) {
  const Clock::time_point deadline = Clock::now() + within;
  std::optional<nlohmann::json> row;
  do {
    row = smi_row(pid);
    if (done(row)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (Clock::now() < deadline);
  return row;
}

const std::string kTraining = "train --model mlp --threads 1 --time-limit 60";

TEST_F(SmiCli, ATrainingIsListedWithGrowingStepsAndGoneOnceKilled) {
  const pid_t pid = start_weft(kTraining);
  ASSERT_GT(pid, 0);
  const auto has_stepped = [](const std::optional<nlohmann::json>& r) { return r && r->at("progress").get<int64_t>() > 0; };
  const std::optional<nlohmann::json> first = poll_smi(pid, has_stepped, std::chrono::seconds(15));
  ASSERT_TRUE(has_stepped(first)) << "the training never appeared with a step: " << (first ? first->dump() : "no row");
  EXPECT_EQ(first->at("command"), "train");
  EXPECT_EQ(first->at("model"), "mlp");
  EXPECT_EQ(first->at("progress_name"), "step");
  EXPECT_GT(first->at("rss_bytes").get<int64_t>(), 0);
  EXPECT_GT(first->at("allocated_bytes").get<int64_t>(), 0);
  EXPECT_GE(first->at("reserved_bytes").get<int64_t>(), first->at("allocated_bytes").get<int64_t>());
  EXPECT_GE(first->at("peak_allocated_bytes").get<int64_t>(), first->at("allocated_bytes").get<int64_t>());
  EXPECT_EQ(first->at("num_ooms").get<int64_t>(), 0);

  const int64_t step = first->at("progress").get<int64_t>();
  const std::optional<nlohmann::json> later = poll_smi(
      pid, [step](const std::optional<nlohmann::json>& r) { return r && r->at("progress").get<int64_t>() > step; },
      std::chrono::seconds(5));
  ASSERT_TRUE(later.has_value());
  EXPECT_GT(later->at("progress").get<int64_t>(), step);

  const Outcome table = weft_cli("smi");
  EXPECT_EQ(table.status, 0) << table.output;
  EXPECT_TRUE(contains(table.output, std::to_string(pid) + " ")) << table.output;
  EXPECT_TRUE(contains(table.output, "train    mlp")) << table.output;
  EXPECT_TRUE(contains(table.output, "ALLOCATED")) << table.output;

  // SIGKILL leaves the file behind; smi sees its process gone (first a zombie, as it is not
  // reaped yet) and skips it.
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  const std::optional<nlohmann::json> after =
      poll_smi(pid, [](const std::optional<nlohmann::json>& r) { return !r; }, std::chrono::seconds(5));
  EXPECT_FALSE(after.has_value()) << after->dump();
  EXPECT_FALSE(fs::exists(status_file(pid))) << "smi removes a stale status";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

// Either way a signal ends a training, the status goes with it: mid-run, the loop stops after the
// step and returns (exit 0); before the loop listens, the signal's default action ends it.
TEST_F(SmiCli, ATrainingStoppedBySignalRemovesItsStatus) {
  const pid_t in_loop = start_weft(kTraining);
  ASSERT_GT(in_loop, 0);
  const auto has_stepped = [](const std::optional<nlohmann::json>& r) { return r && r->at("progress").get<int64_t>() > 0; };
  ASSERT_TRUE(has_stepped(poll_smi(in_loop, has_stepped, std::chrono::seconds(15))));
  ASSERT_EQ(kill(in_loop, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(in_loop, &status, 0), in_loop);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(fs::exists(status_file(in_loop)));

  const pid_t starting = start_weft(kTraining);
  ASSERT_GT(starting, 0);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(15);
  while (!fs::exists(status_file(starting)) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(fs::exists(status_file(starting)));
  ASSERT_EQ(kill(starting, SIGINT), 0);
  ASSERT_EQ(waitpid(starting, &status, 0), starting);
  EXPECT_FALSE(fs::exists(status_file(starting)));
}

TEST_F(SmiCli, ShowsTheMachine) {
  const Outcome o = weft_cli("smi --json");
  ASSERT_EQ(o.status, 0) << o.output;
  const nlohmann::json j = last_line_json(o.output);
  const int cores = j.at("cpu").at("cores");
  EXPECT_EQ(cores, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_EQ(j.at("cpu").at("utilisation").size(), static_cast<size_t>(cores));
  for (double u : j.at("cpu").at("utilisation")) EXPECT_TRUE(u >= 0 && u <= 1) << u;
  EXPECT_FALSE(j.at("cpu").at("model").get<std::string>().empty());
  EXPECT_GT(j.at("ram").at("total_bytes").get<int64_t>(), 0);
  EXPECT_GT(j.at("ram").at("used_bytes").get<int64_t>(), 0);
  EXPECT_LT(j.at("ram").at("used_bytes").get<int64_t>(), j.at("ram").at("total_bytes").get<int64_t>());
  EXPECT_TRUE(j.at("processes").empty());
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    EXPECT_EQ(j.at("gpu").at("note"), "no GPU found (NVML not available)");
    EXPECT_TRUE(j.at("gpu").at("devices").empty());
    const Outcome table = weft_cli("smi");
    EXPECT_TRUE(contains(table.output, "GPU   no GPU found (NVML not available)")) << table.output;
    EXPECT_TRUE(contains(table.output, "no running weft processes")) << table.output;
  } else {
    dlclose(nvml);
  }
}

TEST_F(SmiCli, WatchRedrawsUntilInterrupted) {
  // SIGINT after 2.5 s: a view at once (0.2 s to sample) and one every 0.3 s from the start of the
  // last, so at most 9, and at least 2 even for a binary that takes a second to start (the
  // sanitizer build beside another test).
  const std::string command = "timeout -s INT 2.5 " + std::string(WEFT_CLI_PATH) + " smi --watch 0.3 --json";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  pclose(pipe);
  std::istringstream lines(output);
  int views = 0;
  for (std::string line; std::getline(lines, line); ++views) EXPECT_TRUE(nlohmann::json::parse(line).contains("cpu"));
  EXPECT_GE(views, 2) << output;
  EXPECT_LE(views, 9) << output;
}

nlohmann::json status_of_this_process() { return weft::testing::status_of_this_process().to_json(); }

TEST_F(SmiCli, HostileStatusFilesNeitherHangNorReachTheTerminal) {
  ASSERT_EQ(mkfifo((dir_ / "x.json").c_str(), 0600), 0);
  ASSERT_EQ(mkfifo((dir_ / "4242.json").c_str(), 0600), 0);
  std::ofstream(dir_ / "4243.json") << std::string(40 << 20, '[');
  nlohmann::json init = status_of_this_process();
  init["pid"] = 1;
  init["proc_start_ticks"] = monitor::process_start_ticks(1).value();
  std::ofstream(dir_ / "1.json") << init.dump();
  nlohmann::json mine = status_of_this_process();
  mine["command"] = "\x1b]0;owned\x07";  // sets the terminal's title
  mine["model"] = "\x1b[2J\u009b31m\u202eevil";  // clears the screen; C1 CSI; right-to-left override
  std::ofstream(status_file(getpid())) << mine.dump();

  const auto start = Clock::now();
  const Outcome table = weft_cli("smi");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_EQ(table.output.find_first_of("\x1b\x07"), std::string::npos) << table.output;
  EXPECT_EQ(table.output.find("\xc2\x9b"), std::string::npos) << table.output;
  EXPECT_TRUE(contains(table.output, "\\x1b]0;owned\\x07")) << table.output;
  EXPECT_TRUE(contains(table.output, "\\x1b[2J\\xc2\\x9b31m\\xe2\\x80\\xaeevil")) << table.output;
  EXPECT_EQ(table.output.find("\u202e"), std::string::npos) << table.output;
  EXPECT_TRUE(contains(table.output, "note: not listed: cannot read " + (dir_ / "4242.json").string() +
                                         ": expected a regular file, found a FIFO"))
      << table.output;
  EXPECT_TRUE(contains(table.output, "4243.json: it is 41943040 bytes, more than the 65536 bytes")) << table.output;

  const Outcome json = weft_cli("smi --json");
  ASSERT_EQ(json.status, 0) << json.output;
  const nlohmann::json view = last_line_json(json.output);
  ASSERT_EQ(view.at("processes").size(), 1u) << json.output;  // not pid 1
  EXPECT_EQ(view.at("processes")[0].at("pid"), getpid());
  EXPECT_EQ(view.at("skipped").size(), 2u) << json.output;
}

// weft smi reading NVML as it reads the driver's, from a stand-in library (tests/monitor/nvml_stub.cpp).
class SmiWithNvml : public SmiCli {
 protected:
  void SetUp() override {
    SmiCli::SetUp();
    setenv("LD_LIBRARY_PATH", WEFT_NVML_STUB_DIR, 1);
  }
  void TearDown() override {
    unsetenv("LD_LIBRARY_PATH");
    unsetenv("WEFT_NVML_STUB");
    unsetenv("WEFT_NVML_STUB_PID");
    SmiCli::TearDown();
  }
};

TEST_F(SmiWithNvml, ShowsEachGpusReadingsAndTheProcessesOnIt) {
  // This test's process publishes a status as a weft training, and NVML says it computes on GPU 0.
  std::ofstream(status_file(getpid())) << status_of_this_process().dump();
  setenv("WEFT_NVML_STUB_PID", std::to_string(getpid()).c_str(), 1);
  const Outcome table = weft_cli("smi");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_TRUE(contains(table.output, "GPU 0 NVIDIA H100 80GB HBM3 (stub)\n"
                                     "      memory 3.00 GiB / 80.00 GiB  util 87% (memory 41%)  61 C  power 412 / 700 W"
                                     "  clocks SM 1755 / 1980 MHz, memory 2619 / 2619 MHz\n"
                                     "      pid " + std::to_string(getpid()) + " (weft train)  1.50 GiB\n"
                                     "      pid 1  n/a\n"
                                     "GPU 1 NVIDIA H100 80GB HBM3 (stub)\n"
                                     "      memory 0 B / 80.00 GiB  util 0% (memory 0%)  62 C"))
      << table.output;

  const Outcome json = weft_cli("smi --json");
  ASSERT_EQ(json.status, 0) << json.output;
  const nlohmann::json gpu = last_line_json(json.output).at("gpu");
  EXPECT_EQ(gpu.at("available"), true);
  ASSERT_EQ(gpu.at("devices").size(), 2u);
  const nlohmann::json& g = gpu.at("devices")[0];
  EXPECT_EQ(g.at("memory_used_bytes"), 3ll << 30);
  EXPECT_EQ(g.at("memory_total_bytes"), 80ll << 30);
  EXPECT_EQ(g.at("utilisation_percent"), 87);
  EXPECT_EQ(g.at("memory_utilisation_percent"), 41);
  EXPECT_EQ(g.at("temperature_c"), 61);
  EXPECT_DOUBLE_EQ(g.at("power_watts").get<double>(), 412.3);
  EXPECT_DOUBLE_EQ(g.at("power_cap_watts").get<double>(), 700);
  EXPECT_EQ(g.at("sm_clock_mhz"), 1755);
  EXPECT_EQ(g.at("sm_clock_max_mhz"), 1980);
  EXPECT_EQ(g.at("memory_clock_mhz"), 2619);
  EXPECT_EQ(g.at("memory_clock_max_mhz"), 2619);
  EXPECT_EQ(g.at("processes"), nlohmann::json::parse(str(R"([{"pid":)", getpid(),
                                                             R"(,"memory_bytes":1610612736},{"pid":1,"memory_bytes":null}])")));
  EXPECT_TRUE(gpu.at("devices")[1].at("processes").empty());
}

TEST_F(SmiWithNvml, ReadingsTheDeviceDoesNotSupportAreNotAvailable) {
  setenv("WEFT_NVML_STUB", "unsupported", 1);
  const Outcome table = weft_cli("smi");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_TRUE(contains(table.output, "      memory 3.00 GiB / 80.00 GiB  util n/a (memory n/a)  n/a  power n/a / n/a"
                                     "  clocks SM n/a / n/a, memory n/a / n/a\n"))
      << table.output;
  const nlohmann::json g = last_line_json(weft_cli("smi --json").output).at("gpu").at("devices")[0];
  for (const char* field : {"utilisation_percent", "temperature_c", "power_watts", "power_cap_watts", "sm_clock_mhz"})
    EXPECT_TRUE(g.at(field).is_null()) << field << ": " << g.dump();
  EXPECT_TRUE(g.at("processes").empty());
}

TEST_F(SmiWithNvml, ABusyGpuListsEveryProcess) {
  setenv("WEFT_NVML_STUB", "busy", 1);
  const nlohmann::json g = last_line_json(weft_cli("smi --json").output).at("gpu").at("devices")[0];
  ASSERT_EQ(g.at("processes").size(), 100u) << g.dump();
  EXPECT_EQ(g.at("processes")[99].at("pid"), 100099);
}

TEST_F(SmiWithNvml, ADriverThatDoesNotInitialiseIsSaid) {
  setenv("WEFT_NVML_STUB", "init-fails", 1);
  const Outcome table = weft_cli("smi");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_TRUE(contains(table.output, "GPU   no GPU found (NVML did not initialise: no NVIDIA driver loaded?)")) << table.output;
}

// -1e308 as an int64 of seconds was undefined behaviour where smi printed the uptime.
TEST_F(SmiCli, AStartTimeOutOfRangeIsSkippedWithANote) {
  nlohmann::json mine = status_of_this_process();
  mine["started_unix_s"] = -1e308;
  std::ofstream(status_file(getpid())) << mine.dump();
  const Outcome o = weft_cli("smi");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "\"started_unix_s\" must be a number in [0, 1e+11], found -1e+308")) << o.output;
  EXPECT_TRUE(contains(o.output, "no running weft processes")) << o.output;
}

TEST_F(SmiCli, BadWatchPeriodsAreRefused) {
  expect_usage_error(weft_cli("smi --watch 0"), "--watch: must be a number in (0, 86400], got '0'");
  expect_usage_error(weft_cli("smi --watch -2"), "--watch: must be a number in (0, 86400], got '-2'");
  // A period past a day would overflow the clock's nanoseconds in the sleep.
  expect_usage_error(weft_cli("smi --watch 1e300"), "--watch: must be a number in (0, 86400], got '1e300'");
  expect_usage_error(weft_cli("smi --watch soon"), "--watch:");
}

}  // namespace
}  // namespace weft
