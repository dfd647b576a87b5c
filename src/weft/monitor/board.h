// `weft board`: TensorBoard's scalar dashboard for the event files weft writes (io/tensorboard.h),
// since TensorBoard itself is not packaged for Debian. It lives in monitor, beside the other
// instruments that observe training; it needs the io layer's reader and net's HTTP server, not serve's
// model server, so it does not sit above serve.
//
//   GET /           the page (monitor/board_page.h): one chart per tag, the runs overlaid
//   GET /api/runs   RunIndex::runs_json() of the log directory (monitor/run_index.h): on every
//                   request the directory is listed again and what its event files gained is
//                   read, so the page's periodic refresh shows runs still in progress
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "weft/monitor/run_index.h"
#include "weft/net/http.h"

namespace weft::monitor {

struct BoardOptions {
  std::string log_dir;
  std::string host = "127.0.0.1";
  int port = 6006;  // 0: any free port (port() says which)
  // Web pages' origins (http://host:port, or *) allowed to call /api from a browser; others get 403.
  std::vector<std::string> allowed_origins;
};

class BoardServer {
 public:
  // A missing log directory, or one without event files, is an IOError before anything is served.
  // allowed_hosts: Host names browsers may use besides the bound address (a proxy's).
  explicit BoardServer(BoardOptions options, std::vector<std::string> allowed_hosts = {});
  ~BoardServer();
  BoardServer(const BoardServer&) = delete;
  BoardServer& operator=(const BoardServer&) = delete;

  // Binds host:port; IOError naming the address when it cannot (in use, not an address here).
  void bind();
  int port() const;
  // Counts the runs the page shows: those with scalars.
  std::string ready_line() const;
  // Serves until stop(), which may be called from any thread.
  void serve();
  void stop();

 private:
  BoardOptions options_;
  RunIndex index_;
  std::unique_ptr<net::Server> http_;
};

}  // namespace weft::monitor
