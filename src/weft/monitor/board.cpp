#include "weft/monitor/board.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "weft/core/error.h"
#include "weft/io/tensorboard.h"
#include "weft/monitor/board_page.h"

namespace weft::monitor {
namespace {

namespace fs = std::filesystem;

bool is_event_file(const fs::path& path) { return path.filename().string().starts_with("events.out.tfevents."); }

std::vector<std::string> event_files(const fs::path& run) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(run))
    if (entry.is_regular_file() && is_event_file(entry.path())) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<std::string> find_runs(const std::string& log_dir) {
  std::error_code error;
  WEFT_CHECK(fs::is_directory(log_dir, error), IOError, "--logdir ", log_dir, ": not a directory");
  std::vector<std::string> runs;
  const auto add = [&](const fs::path& dir) {
    const std::string name = fs::relative(dir, log_dir).string();
    if (std::find(runs.begin(), runs.end(), name) == runs.end()) runs.push_back(name);
  };
  // Unreadable subdirectories are passed over rather than failing the whole board.
  for (auto it = fs::recursive_directory_iterator(log_dir, fs::directory_options::skip_permission_denied, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error))
    if (it->is_regular_file() && is_event_file(it->path())) add(it->path().parent_path());
  WEFT_CHECK(!error, IOError, "--logdir ", log_dir, ": cannot list it", ": ", error.message());
  std::sort(runs.begin(), runs.end());
  return runs;
}

nlohmann::json read_board(const std::string& log_dir) {
  nlohmann::json board{{"logdir", log_dir}, {"runs", nlohmann::json::array()}, {"skipped", nlohmann::json::array()}};
  for (const std::string& run : find_runs(log_dir)) {
    const fs::path dir = fs::path(log_dir) / run;
    std::vector<io::ScalarEvent> scalars;
    // The whole run at once applies a resumed run's session starts across its files; only when a
    // file of it is bad are the files read one by one, so that the good ones still plot. A run in
    // progress plots the records its writer has finished.
    try {
      scalars = io::read_run_events(dir.string(), io::EventTail::kInProgress).scalars;
    } catch (const Error&) {
      for (const std::string& file : event_files(dir)) {
        try {
          const std::vector<io::ScalarEvent> read = io::read_scalar_events(file, io::EventTail::kInProgress);
          scalars.insert(scalars.end(), read.begin(), read.end());
        } catch (const Error& e) {
          // The reader's message begins with the path, which "file" already gives.
          std::string reason = e.what();
          if (reason.starts_with(file + ": ")) reason.erase(0, file.size() + 2);
          board["skipped"].push_back({{"file", fs::relative(file, log_dir).string()}, {"reason", reason}});
        }
      }
    }
    std::map<std::string, nlohmann::json> tags;
    for (const io::ScalarEvent& s : scalars) {
      nlohmann::json& points = tags[s.tag];
      if (points.is_null()) points = nlohmann::json::array();
      // JSON has no NaN or infinity (nlohmann would write null): they travel as JavaScript spells them.
      const nlohmann::json value = std::isnan(s.value)   ? nlohmann::json("NaN")
                                   : std::isinf(s.value) ? nlohmann::json(s.value > 0 ? "Infinity" : "-Infinity")
                                                         : nlohmann::json(static_cast<double>(s.value));
      points.push_back({s.step, s.wall_time, value});
    }
    // A --logdir that is itself a run is named after its directory: "." would tell the user nothing.
    const std::string own_name = fs::weakly_canonical(fs::absolute(dir)).filename().string();
    const std::string name = run != "." ? run : own_name.empty() ? log_dir : own_name;
    if (!tags.empty()) board["runs"].push_back({{"name", name}, {"tags", tags}});
  }
  return board;
}

BoardServer::BoardServer(BoardOptions options, std::vector<std::string> allowed_hosts)
    : options_(std::move(options)) {
  WEFT_CHECK(!find_runs(options_.log_dir).empty(), IOError, "--logdir ", options_.log_dir,
             ": no runs (a run is a directory holding events.out.tfevents.* files, as weft train --out writes)");
  net::ServerOptions http;
  http.host = options_.host;
  http.port = options_.port;
  http.workers = 4;
  http.allowed_hosts = std::move(allowed_hosts);
  http.error = [](int status, const std::string& message) {
    net::Response r;
    r.status = status;
    r.body = nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return r;
  };
  http_ = std::make_unique<net::Server>(std::move(http));
  http_->get("/", [](const net::Request&) {
    net::Response page;
    page.content_type = "text/html; charset=utf-8";
    page.body = board_page();
    return page;
  }, /*quick=*/true);
  http_->get("/api/runs", [this](const net::Request&) {
    net::Response r;
    r.headers.emplace_back("Cache-Control", "no-store");
    try {
      r.body = read_board(options_.log_dir).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
  const size_t runs = find_runs(options_.log_dir).size();
  return str("weft board: ", runs, runs == 1 ? " run" : " runs", " under ", options_.log_dir, " on http://",
             options_.host, ":", port(), "/");
}

void BoardServer::serve() { http_->serve(); }

void BoardServer::stop() {
  if (http_) http_->stop();
}

}  // namespace weft::monitor
