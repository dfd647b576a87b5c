// The HTTP/1.1 server under `weft serve` and `weft board`: one event loop (epoll) reads and writes
// every connection without blocking, and a pool of worker threads runs the handlers. A client
// that is slow, idle or hostile holds only its own connection, never a thread:
//
//   - a request is read whole (line, headers, body) within `read_timeout_s` of its first byte,
//     and an idle keep-alive connection is closed after the same time; an answer that the client
//     does not take for `write_timeout_s` closes its connection;
//   - the request line and headers are bounded together (`max_head_bytes`, `max_headers`), the
//     body after chunked decoding (`max_body_bytes`); encoded bodies (gzip...) are refused, so no
//     small request decodes into a large one;
//   - at most `max_connections` are open: one more closes the connection that has waited longest
//     for its request, so idle connections cannot lock others out;
//   - pipelined requests are read one at a time and answered in order;
//   - Range is not implemented: every GET answers its whole resource once (RFC 9110 allows a
//     server to ignore Range), so no request asks for its answer many times over;
//   - stop() closes the listening socket and every connection waiting for a request, lets the
//     handlers in flight answer, and serve() returns once they have.
//
// Browsers are kept from turning the server against its user (a page the user visits may send
// requests to 127.0.0.1): a request's Host must name this server (its bound address, an IP
// address, localhost or an --allow-host name), which defeats DNS rebinding; a request that carries
// an Origin is refused unless it is the server's own or allowed (`allowed_origins`); and POST
// bodies must be `application/json`, which a page can only send cross-origin after a CORS
// preflight that this server does not grant.
//
// Every refusal (400, 403, 404, 405, 408, 411, 413, 415, 431, 501, 505) is answered through
// `ServerOptions::error` so that each server formats errors its own way.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::net {

struct Limits {
  int64_t max_head_bytes = 16 << 10;  // the request line, the header fields and the chunked trailers
  int64_t max_headers = 64;
  int64_t max_body_bytes = 8 << 20;   // after chunked decoding
};

struct Request {
  std::string method, target, path, query;  // path and query split from the target at '?'
  int minor_version = 1;                    // HTTP/1.minor_version
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case, in order
  std::string body;

  // The first header field named `name` (lower case), or nullptr.
  const std::string* header(std::string_view name) const;
  // The query parameter `name`, percent-decoded; nullopt when absent.
  std::optional<std::string> param(std::string_view name) const;
  // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "Connection: keep-alive".
  bool keep_alive() const;
};

// Reads one request from bytes as they arrive: feed() takes what has come and returns how much of
// it is used; the caller keeps the rest and offers it again with more appended. A line (request
// line, header, chunk size) is used only once it is whole; body bytes as they come. After
// complete(), the bytes not used belong to the next (pipelined) request.
class RequestParser {
 public:
  explicit RequestParser(Limits limits = {});
  size_t feed(std::string_view bytes);
  bool complete() const { return phase_ == Phase::complete; }
  bool failed() const { return phase_ == Phase::failed; }
  // The request line and headers are read and the body is still to come, and the client asked
  // for "Expect: 100-continue".
  bool wants_continue() const;
  // When failed(): the status to answer with, and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  Request& request() { return request_; }
  // Ready for the next request.
  void reset();

 private:
  enum class Phase { head, body, chunk_size, chunk_data, chunk_crlf, trailers, complete, failed };
  size_t fail(int status, std::string message);
  size_t read_head(std::string_view bytes);
  Limits limits_;
  Phase phase_ = Phase::head;
  Request request_;
  int64_t remaining_ = 0;   // body or chunk bytes still to come
  int64_t trailer_bytes_ = 0;
  size_t head_scanned_ = 0;  // the head's end was looked for in this many bytes already
  bool expect_continue_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // When set, the body is sent as the function writes it (chunked), from the handler's thread
  // after the head has gone; write() returns false once the client has gone away.
  class Writer {
   public:
    virtual ~Writer() = default;
    virtual bool write(std::string_view bytes) = 0;
  };
  std::function<void(Writer&)> stream;
};

// A page of the server's own (the playground, the board).
Response html_page(std::string html);

using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  Limits limits;
  double read_timeout_s = 5;
  double write_timeout_s = 5;
  int workers = 16;             // handlers run at once
  int max_connections = 1024;   // open at once (and at most what RLIMIT_NOFILE leaves)
  std::vector<std::string> allowed_hosts;    // names a Host header may give besides this server's own
  std::vector<std::string> allowed_origins;  // "http://host:port" (or "*") a browser page may call from
  // The body of a refusal: status and message.
  std::function<Response(int status, const std::string& message)> error;
  // After each answer (refusals included), on the thread that answered: the request as far as it
  // was read, the status and the seconds from the request's arrival to its last byte queued.
  std::function<void(const Request&, int status, double seconds)> on_answered;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Routes by exact path. A quick handler runs on the event loop itself (it must not block: a
  // health check, a fixed page), so it answers even when every worker is busy. A POST route takes
  // only application/json bodies.
  void get(const std::string& path, Handler handler, bool quick = false);
  void post(const std::string& path, Handler handler);

  // Binds host:port; IOError naming the address when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop(); returns once every request in flight has been answered.
  void serve();
  // From any thread (or a signal's thread): see the header.
  void stop();

  // The answer to a whole request, without a socket: the Host, Origin and Content-Type checks,
  // the routing and the handler. serve() answers through it; the fuzz targets and tests call it.
  Response answer(const Request& request) const;
  // The answer to a request the parser refused.
  Response refusal(int status, const std::string& message) const;

 private:
  struct Route {
    Handler handler;
    bool quick = false;
  };
  struct Loop;
  bool host_allowed(const std::string& host) const;
  const Route* find(const Request& request) const;

  ServerOptions options_;
  std::map<std::string, std::map<std::string, Route>> routes_;  // path -> method -> route
  std::vector<std::string> own_hosts_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // stop() wakes the loop through it
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Loop> loop_;
};

// "HTTP/1.1 200 OK\r\n..." up to the blank line, for a response whose body follows (its length,
// or chunked when streamed).
std::string response_head(const Response& response, bool keep_alive);

}  // namespace weft::net
