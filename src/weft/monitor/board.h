// `weft board`: TensorBoard's scalar dashboard for the event files weft writes (io/tensorboard.h),
// since TensorBoard itself is not packaged for Debian. It lives in monitor, beside the other
// instruments that observe training; it needs the io layer's reader and net's HTTP server, not serve's
// model server, so it does not sit above serve.
//
//   GET /           the page (monitor/board_page.h): one chart per tag, the runs overlaid
//   GET /api/runs   read_board() of the log directory, read afresh from the files on every
//                   request, so the page's periodic refresh shows runs still in progress
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/net/http.h"


namespace weft::monitor {

// A run is a directory at or under log_dir holding events.out.tfevents.* files; named by its
// path relative to log_dir ("." for log_dir itself), sorted.
std::vector<std::string> find_runs(const std::string& log_dir);

// {"logdir": ..., "runs": [{"name": run, "tags": {tag: [[step, wall_time, value], ...]}}],
//  "skipped": [{"file": path, "reason": the reader's error}]}. The run "." is named after log_dir's
// own directory; a NaN or infinite value is the string "NaN", "Infinity" or "-Infinity".
// A corrupt or truncated event file is skipped and listed, and the rest of its run and the other
// runs are still read.
nlohmann::json read_board(const std::string& log_dir);

struct BoardOptions {
  std::string log_dir;
  std::string host = "127.0.0.1";
  int port = 6006;  // 0: any free port (port() says which)
};

class BoardServer {
 public:
  // A missing log directory, or one without runs, is an IOError before anything is served.
  // allowed_hosts: Host names browsers may use besides the bound address (a proxy's).
  explicit BoardServer(BoardOptions options, std::vector<std::string> allowed_hosts = {});
  ~BoardServer();
  BoardServer(const BoardServer&) = delete;
  BoardServer& operator=(const BoardServer&) = delete;

  // Binds host:port; IOError naming the address when it cannot (in use, not an address here).
  void bind();
  int port() const;
  std::string ready_line() const;
  // Serves until stop(), which may be called from any thread.
  void serve();
  void stop();

 private:
  BoardOptions options_;
  std::unique_ptr<net::Server> http_;
};

}  // namespace weft::monitor
