// `weft serve`: the REST server of src/weft/serve/server.h for one or more checkpoints, until
// SIGTERM or SIGINT, which stop it accepting, let it answer what is in flight, and exit 0.
#include <atomic>
#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <thread>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/monitor/status_file.h"
#include "weft/serve/server.h"
#include "weft/train/options.h"
#include "weft/train/stop_signals.h"

namespace weft::cli {

namespace {

struct ServeFlags {
  std::vector<std::string> checkpoints;
  serve::ServeOptions options;
};

void serve_models(const ServeFlags& f) {
  std::vector<serve::ModelSpec> specs;
  for (const std::string& c : f.checkpoints) specs.push_back(serve::parse_model_spec(c));
  serve::Server server(specs, f.options);
  server.bind();
  std::cout << server.ready_line() << std::endl;
  const monitor::StatusPublisher published("serve", server.model_names(), "requests");
  // The signal is taken on its own thread (train/stop_signals.h) and seen here.
  const train::StopOnSignal stop;
  // serve() returns early only on an error (its threads could not start), which ends the command.
  std::exception_ptr failed;
  std::atomic<bool> ended = false;
  std::thread serving([&] {
    try {
      server.serve();
    } catch (...) {
      failed = std::current_exception();
    }
    ended = true;
  });
  while (stop.received().empty() && !ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (ended) {
    serving.join();
    if (failed) std::rethrow_exception(failed);
  }
  std::cout << stop.received() << ": no new connections; answering the requests in flight" << std::endl;
  server.stop();
  serving.join();
  if (failed) std::rethrow_exception(failed);
  std::cout << "stopped" << std::endl;
}

}  // namespace

void add_serve_command(CLI::App& app, std::function<void()>& run) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* s = app.add_subcommand("serve", "serve checkpoints over HTTP: predictions, completions, metrics");
  s->add_option("--checkpoint", f->checkpoints,
                "a checkpoint directory or .safetensors file of weft train or weft quantize; NAME=PATH names it "
                "(requests pick it with \"model\"); give it once per model")
      ->required()->check(not_empty());
  s->add_option("--host", f->options.host, "the address to listen on (default: loopback only)")->check(not_empty());
  number_flag(s, "--port", f->options.port, "the port (0: any free one, printed)", {.min = 0, .max = 65535});
  number_flag(s, "--max-batch", f->options.batch.max_batch,
              "classifiers: inputs run together at most; a GPT: sequences decoded together at most (its KV cache, "
              "allocated at the start, must fit the machine's memory)",
              {.min = 1, .max = train::kMaxCount});
  number_flag(s, "--max-wait-ms", f->options.batch.max_wait_ms,
              "classifiers: how long the oldest request waits for others to join its batch", {.min = 0, .max = 60000});
  number_flag(s, "--max-queue", f->options.batch.max_queue, "requests waiting per model; more are answered 503",
              {.min = 1});
  number_flag(s, "--threads", f->options.batch.threads, "each model's compute threads (0: all cores)",
              {.min = 0, .max = train::kMaxThreads});
  s->add_option("--precision", f->options.precision, "fp32 | bf16: a classifier's weights converted (default: as saved)")
      ->check(one_of({"fp32", "bf16"}));
  number_flag(s, "--max-body", f->options.max_body_bytes, "bytes a request body may hold; more are answered 413",
              {.min = 1});
  number_flag(s, "--connections", f->options.connections, "requests handled at once (a thread each)",
              {.min = 1, .max = 4096});
  number_flag(s, "--max-connections", f->options.max_connections,
              "connections open at once; one more closes the one idle longest", {.min = 1, .max = 65536});
  s->add_option("--allow-host", f->options.allowed_hosts,
                "a host name clients may reach the server by, besides its address (behind a proxy); "
                "other names are refused, against DNS rebinding")
      ->check(not_empty());
  s->add_option("--allow-origin", f->options.allowed_origins,
                "a web page's origin (http://host:port, or *) allowed to call the API from a browser; "
                "other pages are refused")
      ->check(not_empty());
  s->add_option("--data-dir", f->options.data_dir,
                "where the playground's test images are read (default: the data set's own, as weft eval reads)")
      ->check(not_empty());
  number_flag(s, "--timeout", f->options.timeout_s, "seconds to read a request or write a response",
              {.min = 0.001, .max = 3600});
  s->callback([&run, f] { run = [f] { serve_models(*f); }; });
}

}  // namespace weft::cli
