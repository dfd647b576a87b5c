#include "weft/monitor/board.h"

#include "weft/core/error.h"
#include "weft/monitor/board_page.h"

namespace weft::monitor {

BoardServer::BoardServer(BoardOptions options, std::vector<std::string> allowed_hosts)
    : options_(std::move(options)), index_(options_.log_dir) {
  index_.refresh();
  WEFT_CHECK(index_.found_event_files(), IOError, "--logdir ", options_.log_dir,
             ": no runs (a run is a directory holding events.out.tfevents.* files, as weft train --out writes)");
  net::ServerOptions http;
  http.host = options_.host;
  http.port = options_.port;
  http.workers = 4;
  http.allowed_hosts = std::move(allowed_hosts);
  http.allowed_origins = options_.allowed_origins;
  http.error = [](int status, const std::string& message) {
    net::Response r;
    r.status = status;
    r.body = nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return r;
  };
  http_ = std::make_unique<net::Server>(std::move(http));
  http_->get("/", [](const net::Request&) { return net::html_page(board_page()); }, /*quick=*/true);
  http_->get("/api/runs", [this](const net::Request&) {
    net::Response r;
    r.headers.emplace_back("Cache-Control", "no-store");
    try {
      r.body = index_.runs_json();
    } catch (const Error& e) {
      // The log directory vanished or became unreadable while serving: the page says so.
      r.status = 500;
      r.body = nlohmann::json{{"error", e.what()}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    return r;
  });
}

BoardServer::~BoardServer() { stop(); }

void BoardServer::bind() { http_->bind(); }
int BoardServer::port() const { return http_->port(); }

std::string BoardServer::ready_line() const {
  const size_t runs = index_.shown_runs().size();
  return str("weft board: ", runs, runs == 1 ? " run" : " runs", " under ", options_.log_dir, " on http://",
             options_.host, ":", port(), "/");
}

void BoardServer::serve() { http_->serve(); }

void BoardServer::stop() {
  if (http_) http_->stop();
}

}  // namespace weft::monitor
