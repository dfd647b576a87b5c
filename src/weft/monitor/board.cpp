#include "weft/monitor/board.h"

#include <httplib.h>
#include <sys/socket.h>

#include "weft/core/error.h"
#include "weft/monitor/board_page.h"

namespace weft::monitor {

BoardServer::BoardServer(BoardOptions options) : options_(std::move(options)), index_(options_.log_dir) {
  index_.refresh();
  WEFT_CHECK(index_.found_event_files(), IOError, "--logdir ", options_.log_dir,
             ": no runs (a run is a directory holding events.out.tfevents.* files, as weft train --out writes)");
  http_ = std::make_unique<httplib::Server>();
  // As in weft serve (serve/server.cpp): TCP_NODELAY, so an answer sent as headers then body does
  // not wait 40 ms for a delayed ACK; SO_REUSEADDR rather than httplib's SO_REUSEPORT, so that a
  // second board on a busy port fails instead of sharing it.
  http_->set_tcp_nodelay(true);
  http_->set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(board_page(), "text/html; charset=utf-8");
  });
  http_->Get("/api/runs", [this](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(index_.runs_json(), "application/json");
    } catch (const Error& e) {
      // The log directory vanished or became unreadable while serving: the page says so.
      res.status = 500;
      res.set_content(nlohmann::json{{"error", e.what()}}.dump(), "application/json");
    }
    res.set_header("Cache-Control", "no-store");
  });
}

BoardServer::~BoardServer() { stop(); }

void BoardServer::bind() {
  const bool bound = options_.port == 0 ? (port_ = http_->bind_to_any_port(options_.host)) > 0
                                        : http_->bind_to_port(options_.host, options_.port);
  WEFT_CHECK(bound, IOError, "cannot listen on ", options_.host, ":", options_.port,
             ": the port is in use, or the address is not one of this machine's");
  if (options_.port != 0) port_ = options_.port;
}

std::string BoardServer::ready_line() const {
  const size_t runs = index_.shown_runs().size();
  return str("weft board: ", runs, runs == 1 ? " run" : " runs", " under ", options_.log_dir, " on http://",
             options_.host, ":", port_, "/");
}

void BoardServer::serve() { http_->listen_after_bind(); }

void BoardServer::stop() {
  if (http_) http_->stop();
}

}  // namespace weft::monitor
