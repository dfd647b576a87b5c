// `weft serve` as a user runs it: what it cannot serve is refused in one line with exit status 2
// before anything is served, and SIGTERM lets the request in flight be answered, then exits 0.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <netinet/in.h>

#include "cli/weft_cli.h"
#include "temp_dir.h"
#include "weft/core/error.h"
#include "weft/core/random.h"
#include "weft/data/tokenizer.h"
#include "weft/infer/metadata.h"
#include "weft/io/safetensors.h"
#include "weft/nn/gpt.h"
#include "weft/nn/models.h"

namespace weft {
namespace {

using testing::Outcome;
using testing::TempDir;
using testing::weft_cli;

std::string save_mlp(const TempDir& dir) {
  manual_seed(3);
  auto mlp = nn::make_mlp();
  nn::StateDict state = mlp->state_dict();
  auto metadata = infer::classifier_metadata("fashion-mnist");
  metadata["weft.model"] = "mlp";
  metadata["format"] = "pt";
  io::save_safetensors(dir.file("mlp.safetensors"), {state.begin(), state.end()}, metadata);
  return dir.file("mlp.safetensors");
}

std::string save_gpt(const TempDir& dir) {
  manual_seed(4);
  nn::GPT gpt(nn::GPTConfig{.layers = 2, .heads = 2, .dim = 32, .context = 32, .vocab = 256});
  nn::StateDict state = gpt.state_dict();
  auto metadata = infer::gpt_metadata(gpt.config, data::ByteTokenizer());
  metadata["weft.model"] = "gpt";
  io::save_safetensors(dir.file("gpt.safetensors"), {state.begin(), state.end()}, metadata);
  return dir.file("gpt.safetensors");
}

// `weft serve ARGS` in the background: its pid, and the port from the line it prints when ready.
struct Served {
  pid_t pid = -1;
  int port = 0;
  FILE* out = nullptr;
};
Served start_serving(const std::string& args) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl("/bin/sh", "sh", "-c", (std::string("exec ") + WEFT_CLI_PATH + " serve " + args).c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  Served s{pid, 0, fdopen(fds[0], "r")};
  char line[1024];
  if (fgets(line, sizeof line, s.out) != nullptr) {
    const std::string text = line;
    const size_t colon = text.find(':', text.find("127.0.0.1"));
    if (colon != std::string::npos) s.port = std::stoi(text.substr(colon + 1));
  }
  return s;
}

int wait_for_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ServeCli, SigtermAnswersTheRequestInFlightAndExits0) {
  TempDir dir;
  // The request waits three seconds in the batcher's queue for others to join it: SIGTERM comes then.
  Served s = start_serving("--checkpoint " + save_mlp(dir) + " --port 0 --max-wait-ms 3000 --threads 1");
  ASSERT_GT(s.port, 0);
  std::future<int> in_flight = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port);
    std::string pixels;
    for (int i = 0; i < 784; ++i) pixels += i ? ",7" : "7";
    const httplib::Result r = c.Post("/v1/predict", "{\"inputs\": [[" + pixels + "]]}", "application/json");
    return r ? r->status : -1;
  });
  httplib::Client metrics("127.0.0.1", s.port);
  for (;;) {  // until the request is in the queue
    const httplib::Result r = metrics.Get("/metrics");
    if (r && testing::contains(r->body, "weft_queue_depth{model=\"mlp\"} 1")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(s.pid, SIGTERM);
  EXPECT_EQ(in_flight.get(), 200);
  EXPECT_EQ(wait_for_exit(s.pid), 0);
  std::string rest;
  char buffer[256];
  while (size_t n = fread(buffer, 1, sizeof buffer, s.out)) rest.append(buffer, n);
  fclose(s.out);
  EXPECT_TRUE(testing::contains(rest, "SIGTERM: no new connections; answering the requests in flight")) << rest;
  EXPECT_TRUE(testing::contains(rest, "stopped")) << rest;
  // Nothing listens there any more.
  httplib::Client after("127.0.0.1", s.port);
  EXPECT_FALSE(after.Get("/healthz"));
}

TEST(ServeCli, WhatCannotBeServedIsRefusedInOneLine) {
  TempDir dir;
  const std::string mlp = save_mlp(dir);
  testing::expect_usage_error(weft_cli("serve --checkpoint " + dir.file("missing")), "missing");
  {
    FILE* f = fopen(dir.file("corrupt.safetensors").c_str(), "w");
    fputs("{not safetensors", f);
    fclose(f);
  }
  testing::expect_usage_error(weft_cli("serve --checkpoint " + dir.file("corrupt.safetensors")), "corrupt.safetensors");
  testing::expect_usage_error(weft_cli("serve --checkpoint " + mlp + " --checkpoint " + mlp), "two models named 'mlp'");
  testing::expect_usage_error(weft_cli("serve --checkpoint " + mlp + " --precision fp16"), "--precision");
  testing::expect_usage_error(weft_cli("serve --checkpoint " + mlp + " --port 70000"), "--port");
  testing::expect_usage_error(weft_cli("serve --checkpoint " + mlp + " --host 192.0.2.1 --port 8080"),
                              "cannot listen on 192.0.2.1:8080");
  // A port this test holds.
  const int held = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(held, 1), 0);
  socklen_t length = sizeof address;
  getsockname(held, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);
  testing::expect_usage_error(weft_cli("serve --checkpoint " + mlp + " --port " + std::to_string(port)),
                              "cannot listen on 127.0.0.1:" + std::to_string(port));
  close(held);
}

// A GPT's KV cache is allocated whole for --max-batch sequences of its context: one larger than
// the machine's memory is refused before the server says it serves (it aborted after "serving on").
TEST(ServeCli, AKvCacheLargerThanTheMachineIsRefusedBeforeServing) {
  TempDir dir;
  const std::string gpt = save_gpt(dir);
  const int64_t memory = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  const int64_t per_sequence = 2 * 2 * 32 * 32 * 4;  // keys and values, 2 layers, 32 positions of width 32, f32
  const std::string max_batch = std::to_string(memory / per_sequence + 1);
  const Outcome o = weft_cli("serve --port 0 --checkpoint " + gpt + " --max-batch " + max_batch);
  testing::expect_usage_error(o, "--max-batch: " + max_batch + " sequences of this GPT's 32-token context need a KV "
                                 "cache of ");
  EXPECT_TRUE(testing::contains(o.output, str("at most ", memory / per_sequence, " fit"))) << o.output;
  EXPECT_FALSE(testing::contains(o.output, "serving on")) << o.output;
  // Under a memory limit below the machine's, the limit is the bound: 4096 sequences take 64 MiB.
  setenv("WEFT_MEMORY_LIMIT", "64MiB", 1);
  const Outcome limited = weft_cli("serve --port 0 --checkpoint " + gpt + " --max-batch 4097");
  unsetenv("WEFT_MEMORY_LIMIT");
  testing::expect_usage_error(limited, "--max-batch: 4097 sequences of this GPT's 32-token context need a KV cache of "
                                       "64.02 MiB (keys and values of 2 layers of width 32, 4 bytes each), more than "
                                       "the memory limit of 64.00 MiB (WEFT_MEMORY_LIMIT); at most 4096 fit");
#ifndef __SANITIZE_ADDRESS__  // AddressSanitizer's shadow memory needs more address space than this
  // A process limit below the machine's memory (ulimit -v) bounds it too: the cache's allocation
  // failed past the check and ended the server in std::terminate.
  const std::string command = "ulimit -v 4000000; exec " + std::string(WEFT_CLI_PATH) + " serve --port 0 --checkpoint " +
                              gpt + " --max-batch 1000000 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << output;
  EXPECT_TRUE(testing::contains(output, "cache of 15.26 GiB (keys and values of 2 layers of width 32, 4 bytes each), "
                                        "more than this machine's 3.81 GiB of memory; at most 250000 fit"))
      << output;
#endif
}

}  // namespace
}  // namespace weft
