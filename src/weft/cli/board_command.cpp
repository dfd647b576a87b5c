// `weft board`: the scalar dashboard of src/weft/monitor/board.h for a log directory, until
// SIGTERM or SIGINT.
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/monitor/board.h"
#include "weft/train/stop_signals.h"

namespace weft::cli {

namespace {

struct BoardFlags {
  monitor::BoardOptions options;
  std::vector<std::string> allowed_hosts;
};

void run_board(const BoardFlags& flags) {
  monitor::BoardServer board(flags.options, flags.allowed_hosts);
  board.bind();
  std::cout << board.ready_line() << std::endl;
  // The signal is taken on its own thread (train/stop_signals.h) and seen here.
  const train::StopOnSignal stop;
  std::thread serving([&board] { board.serve(); });
  while (stop.received().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  board.stop();
  serving.join();
}

}  // namespace

void add_board_command(CLI::App& app, std::function<void()>& run) {
  auto flags = std::make_shared<BoardFlags>();
  monitor::BoardOptions* options = &flags->options;
  CLI::App* b = app.add_subcommand("board", "plot the scalars of the TensorBoard event files under a log directory");
  b->add_option("--logdir", options->log_dir,
                "the directory whose runs (directories holding events.out.tfevents.* files, up to 16 levels down) are plotted")
      ->required()->check(not_empty());
  b->add_option("--host", options->host, "the address to listen on (default: loopback only)")->check(not_empty());
  number_flag(b, "--port", options->port, "the port (0: any free one, printed)", {.min = 0, .max = 65535});
  b->add_option("--allow-host", flags->allowed_hosts,
                "a host name browsers may reach the board by, besides its address (behind a proxy); other "
                "names are refused, against DNS rebinding")
      ->check(not_empty());
  b->add_option("--allow-origin", options->allowed_origins,
                "a web page's origin (http://host:port, or *) allowed to call the board's API from a browser; "
                "other pages are refused")
      ->check(not_empty());
  b->callback([&run, flags] { run = [flags] { run_board(*flags); }; });
}

}  // namespace weft::cli
