#include "weft/net/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <system_error>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "weft/core/error.h"

namespace weft::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxChunkLine = 1024;       // a chunk's size and its extensions
constexpr size_t kStreamBacklog = 256 << 10;  // a stream's writer waits while this much is unsent
constexpr size_t kKeptCapacity = 64 << 10;    // buffers larger than this are freed between requests
constexpr int64_t kMaxUnfinishedBytes = int64_t{128} << 20;  // every connection's partial requests, at least

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}
bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A client's text as a message may quote it: at most 80 bytes, control characters as '?'.
std::string quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 80)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return out + (s.size() > 80 ? "...'" : "'");
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decoded(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

bool is_ip_literal(const std::string& host) {
  unsigned char address[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), address) == 1 || inet_pton(AF_INET6, host.c_str(), address) == 1;
}

// The host of a Host header's "host[:port]" ("[v6]:port" for IPv6), in lower case, without a
// trailing dot.
std::string host_part(std::string_view value) {
  std::string_view host = value;
  if (host.starts_with('[')) {
    const size_t close = host.find(']');
    host = close == std::string_view::npos ? host : host.substr(1, close - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (host.ends_with('.')) host.remove_suffix(1);
  return lower(host);
}

}  // namespace

// --- Request and its parser ------------------------------------------------------------------

const std::string* Request::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (n == name) return &v;
  return nullptr;
}

std::optional<std::string> Request::param(std::string_view name) const {
  std::string_view rest = query;
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (percent_decoded(pair.substr(0, eq)) == name)
      return eq == std::string_view::npos ? std::string() : percent_decoded(pair.substr(eq + 1));
  }
  return std::nullopt;
}

bool Request::keep_alive() const {
  const std::string* connection = header("connection");
  const std::string tokens = connection ? lower(*connection) : "";
  return minor_version >= 1 ? tokens.find("close") == std::string::npos : tokens.find("keep-alive") != std::string::npos;
}

RequestParser::RequestParser(Limits limits) : limits_(limits) {}

void RequestParser::reset() {
  phase_ = Phase::head;
  request_ = Request{};
  remaining_ = trailer_bytes_ = 0;
  head_scanned_ = 0;
  expect_continue_ = false;
  error_status_ = 0;
  error_message_.clear();
}

bool RequestParser::wants_continue() const {
  return expect_continue_ && request_.body.empty() &&
         (phase_ == Phase::body || phase_ == Phase::chunk_size || phase_ == Phase::chunk_data);
}

size_t RequestParser::fail(int status, std::string message) {
  phase_ = Phase::failed;
  error_status_ = status;
  error_message_ = std::move(message);
  return 0;
}

size_t RequestParser::read_head(std::string_view bytes) {
  const size_t from = head_scanned_ < 3 ? 0 : head_scanned_ - 3;
  const size_t end = bytes.find("\r\n\r\n", from);
  const auto max_head = static_cast<size_t>(limits_.max_head_bytes);
  if (end == std::string_view::npos || end + 4 > max_head) {
    head_scanned_ = bytes.size();
    if (bytes.size() >= max_head || end != std::string_view::npos)
      return fail(431, str("the request line and headers are over the server's limit of ", max_head, " bytes"));
    return 0;
  }
  std::string_view head = bytes.substr(0, end);
  Request& r = request_;
  // The request line: METHOD SP target SP HTTP/1.x
  size_t eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  head = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 2);
  const size_t sp1 = line.find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, str("the request line ", quoted(line), " is not METHOD TARGET HTTP/1.1"));
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, str("the method ", quoted(method), " is not a token"));
  if (!target.starts_with('/') ||
      std::any_of(target.begin(), target.end(), [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; }))
    return fail(400, str("the target ", quoted(target), " is not a path"));
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    const bool http = version.size() == 8 && version.starts_with("HTTP/") && std::isdigit(version[5]) &&
                      version[6] == '.' && std::isdigit(version[7]);
    return http ? fail(505, str(version, " is not served here: send HTTP/1.1"))
                : fail(400, str("the request line ", quoted(line), " is not METHOD TARGET HTTP/1.1"));
  }
  r.method = method;
  r.target = target;
  r.minor_version = version.back() - '0';
  const size_t question = target.find('?');
  r.path = target.substr(0, question);
  r.query = question == std::string_view::npos ? std::string_view{} : target.substr(question + 1);
  // The header fields: NAME ":" OWS VALUE OWS, one per line.
  while (!head.empty()) {
    eol = head.find("\r\n");
    const std::string_view field = head.substr(0, eol);
    head = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 2);
    if (static_cast<int64_t>(r.headers.size()) == limits_.max_headers)
      return fail(431, str("more than ", limits_.max_headers, " header fields"));
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || !is_token(field.substr(0, colon)))
      return fail(400, str("the header line ", quoted(field), " is not NAME: VALUE"));
    const std::string_view value = trim(field.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(),
                    [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f; }))
      return fail(400, str("the header ", quoted(field.substr(0, colon)), " holds a control character"));
    r.headers.emplace_back(lower(field.substr(0, colon)), value);
  }
  // How the body is framed.
  int lengths = 0, encodings = 0, hosts = 0;
  for (const auto& [name, value] : r.headers) {
    lengths += name == "content-length";
    encodings += name == "transfer-encoding";
    hosts += name == "host";
  }
  if (r.minor_version == 1 && hosts != 1) return fail(400, str("an HTTP/1.1 request needs one Host header, got ", hosts));
  if (const std::string* coding = r.header("content-encoding"); coding && lower(*coding) != "identity")
    return fail(415, str("Content-Encoding ", quoted(*coding), " is not accepted: send the body as it is"));
  if (const std::string* expect = r.header("expect"))
    expect_continue_ = r.minor_version == 1 && lower(*expect) == "100-continue";
  const size_t used = end + 4;
  if (encodings > 0) {
    if (lengths > 0) return fail(400, "a request may not have both Content-Length and Transfer-Encoding");
    if (r.minor_version == 0) return fail(400, "HTTP/1.0 has no Transfer-Encoding");
    if (encodings > 1 || lower(*r.header("transfer-encoding")) != "chunked")
      return fail(501, "Transfer-Encoding: only chunked is accepted");
    phase_ = Phase::chunk_size;
    return used;
  }
  if (lengths > 1) return fail(400, str("Content-Length is given ", lengths, " times"));
  if (lengths == 1) {
    const std::string& value = *r.header("content-length");
    if (value.empty() || value.size() > 18 || !std::all_of(value.begin(), value.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      return fail(400, str("Content-Length ", quoted(value), " is not a byte count"));
    remaining_ = std::stoll(value);
    if (remaining_ > limits_.max_body_bytes)
      return fail(413, str("the body of ", remaining_, " bytes is over the server's limit of ", limits_.max_body_bytes,
                           " (--max-body)"));
    phase_ = remaining_ > 0 ? Phase::body : Phase::complete;
    return used;
  }
  if (r.method == "POST" || r.method == "PUT" || r.method == "PATCH")
    return fail(411, str("a ", r.method, " body needs Content-Length or Transfer-Encoding: chunked"));
  phase_ = Phase::complete;
  return used;
}

size_t RequestParser::feed(std::string_view bytes) {
  size_t used = 0;
  while (phase_ != Phase::complete && phase_ != Phase::failed) {
    const std::string_view rest = bytes.substr(used);
    if (phase_ == Phase::head) {
      const size_t n = read_head(rest);
      if (n == 0) break;
      used += n;
    } else if (phase_ == Phase::body || phase_ == Phase::chunk_data) {
      const auto n = static_cast<size_t>(std::min<int64_t>(remaining_, static_cast<int64_t>(rest.size())));
      request_.body.append(rest.substr(0, n));
      used += n;
      remaining_ -= static_cast<int64_t>(n);
      if (remaining_ > 0) break;
      phase_ = phase_ == Phase::body ? Phase::complete : Phase::chunk_crlf;
    } else if (phase_ == Phase::chunk_crlf) {
      if (rest.size() < 2) break;
      if (!rest.starts_with("\r\n")) return fail(400, "a chunk holds more bytes than its size says"), used;
      used += 2;
      phase_ = Phase::chunk_size;
    } else {
      const size_t eol = rest.find("\r\n");
      const size_t max_line = phase_ == Phase::chunk_size ? kMaxChunkLine : static_cast<size_t>(limits_.max_head_bytes);
      if (eol == std::string_view::npos) {
        if (rest.size() > max_line) fail(phase_ == Phase::chunk_size ? 400 : 431, "a chunk line is too long");
        break;
      }
      const std::string_view line = rest.substr(0, eol);
      used += eol + 2;
      if (phase_ == Phase::trailers) {
        trailer_bytes_ += static_cast<int64_t>(eol + 2);
        if (trailer_bytes_ > limits_.max_head_bytes)
          return fail(431, str("the trailers are over the server's limit of ", limits_.max_head_bytes, " bytes")), used;
        if (line.empty()) phase_ = Phase::complete;
        continue;
      }
      const std::string_view digits = trim(line.substr(0, line.find(';')));
      if (digits.empty() || digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), [](char c) { return hex_value(c) >= 0; }))
        return fail(400, str("the chunk size ", quoted(line), " is not a hexadecimal number")), used;
      int64_t size = 0;
      for (char c : digits) size = size * 16 + hex_value(c);
      if (static_cast<int64_t>(request_.body.size()) + size > limits_.max_body_bytes)
        return fail(413, str("the chunked body is over the server's limit of ", limits_.max_body_bytes,
                             " bytes (--max-body)")), used;
      remaining_ = size;
      phase_ = size == 0 ? Phase::trailers : Phase::chunk_data;
    }
  }
  return used;
}

Response html_page(std::string html) {
  Response page;
  page.content_type = "text/html; charset=utf-8";
  page.body = std::move(html);
  return page;
}

std::string response_head(const Response& response, bool keep_alive) {
  std::string head = str("HTTP/1.1 ", response.status, " ", reason(response.status), "\r\nContent-Type: ",
                         response.content_type, "\r\n");
  head += response.stream ? std::string("Transfer-Encoding: chunked\r\n")
                          : str("Content-Length: ", response.body.size(), "\r\n");
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  head += "X-Content-Type-Options: nosniff\r\n";
  for (const auto& [name, value] : response.headers) head += name + ": " + value + "\r\n";
  return head + "\r\n";
}

// --- Routing and the browser checks ----------------------------------------------------------

Server::Server(ServerOptions options) : options_(std::move(options)) {
  if (!options_.error)
    options_.error = [](int status, const std::string& message) {
      Response r;
      r.status = status;
      r.content_type = "text/plain; charset=utf-8";
      r.body = message + "\n";
      return r;
    };
  own_hosts_ = {lower(options_.host), "localhost"};
  if (options_.host == "0.0.0.0" || options_.host == "::") {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0) own_hosts_.push_back(lower(name));
  }
  for (const std::string& h : options_.allowed_hosts) own_hosts_.push_back(lower(h));
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  WEFT_CHECK(wake_fd_ >= 0, IOError, "cannot start the server: eventfd: ", std::strerror(errno));
}

Server::~Server() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_fd_);
}

void Server::get(const std::string& path, Handler handler, bool quick) { routes_[path]["GET"] = {std::move(handler), quick}; }
void Server::post(const std::string& path, Handler handler) { routes_[path]["POST"] = {std::move(handler), false}; }

bool Server::host_allowed(const std::string& value) const {
  const std::string host = host_part(value);
  return is_ip_literal(host) || std::find(own_hosts_.begin(), own_hosts_.end(), host) != own_hosts_.end() ||
         std::find(own_hosts_.begin(), own_hosts_.end(), "*") != own_hosts_.end();
}

Response Server::refusal(int status, const std::string& message) const { return options_.error(status, message); }

const Server::Route* Server::find(const Request& request) const {
  const auto path = routes_.find(request.path);
  if (path == routes_.end()) return nullptr;
  const auto route = path->second.find(request.method);
  return route == path->second.end() ? nullptr : &route->second;
}

Response Server::answer(const Request& request) const {
  const std::string* host = request.header("host");
  if (host && !host_allowed(*host))
    return refusal(403, str("Host ", quoted(*host), " is not this server's name (DNS rebinding?); a name it may "
                            "be reached by is allowed with --allow-host"));
  std::string cross_origin;  // an allowed Origin other than the server's own
  if (const std::string* origin = request.header("origin")) {
    const bool own = host && lower(*origin) == "http://" + lower(*host);
    const auto& allowed = options_.allowed_origins;
    if (!own) {
      if (std::find(allowed.begin(), allowed.end(), *origin) == allowed.end() &&
          std::find(allowed.begin(), allowed.end(), "*") == allowed.end())
        return refusal(403, str("requests from the web page at ", quoted(*origin),
                                " are refused; allow its origin with --allow-origin"));
      cross_origin = *origin;
    }
  }
  const auto with_cors = [&](Response r) {
    if (!cross_origin.empty()) {
      r.headers.emplace_back("Access-Control-Allow-Origin", cross_origin);
      r.headers.emplace_back("Vary", "Origin");
    }
    return r;
  };
  const auto path = routes_.find(request.path);
  if (path == routes_.end()) return refusal(404, str("no route ", request.method, " ", quoted(request.path)));
  std::string allow;
  for (const auto& [method, route] : path->second) allow += (allow.empty() ? "" : ", ") + method;
  if (request.method == "OPTIONS" && !cross_origin.empty()) {
    Response preflight;
    preflight.status = 204;
    preflight.headers = {{"Access-Control-Allow-Methods", allow}, {"Access-Control-Allow-Headers", "Content-Type"},
                         {"Access-Control-Max-Age", "600"}};
    return with_cors(preflight);
  }
  const Route* route = find(request);
  if (!route) {
    Response r = refusal(405, str(quoted(request.path), " answers ", allow, ", not ", quoted(request.method)));
    r.headers.emplace_back("Allow", allow);
    return r;
  }
  if (request.method == "POST") {
    const std::string* type = request.header("content-type");
    if (!type || lower(trim(type->substr(0, type->find(';')))) != "application/json")
      return refusal(415, "the body must be JSON, sent with Content-Type: application/json");
  }
  try {
    return with_cors(route->handler(request));
  } catch (const std::exception& e) {
    return refusal(500, str("internal error: ", e.what()));
  }
}

// --- The event loop --------------------------------------------------------------------------

namespace {

struct Connection {
  enum class Phase { reading, handling, lingering };
  int fd = -1;
  Phase phase = Phase::reading;
  std::string in;  // bytes read and not yet given to the parser
  RequestParser parser;
  Clock::time_point deadline;   // reading: the request must be whole by then; lingering: closed then
  Clock::time_point arrived;    // the request's first byte
  bool keep_alive = false;
  bool continue_sent = false;
  int64_t held = 0;  // bytes of its unfinished request counted in Loop::unfinished_bytes
  // Shared with the handler's thread:
  std::mutex mutex;
  std::condition_variable drained;
  std::string out;              // bytes queued for the client
  size_t sent = 0;              // of out
  Clock::time_point progress;   // the last time out had bytes and some left
  bool response_done = false;   // the handler has queued its last byte
  std::atomic<bool> closed{false};  // the loop gave up on the client: writes fail

  explicit Connection(int fd, Limits limits) : fd(fd), parser(limits) {}
};

using ConnectionPtr = std::shared_ptr<Connection>;

// A stream's writer: the handler's thread queues chunks, and waits while the client is behind.
class ChunkWriter : public Response::Writer {
 public:
  ChunkWriter(ConnectionPtr c, std::function<void(const ConnectionPtr&)> wake, bool chunked)
      : c_(std::move(c)), wake_(std::move(wake)), chunked_(chunked) {}
  bool write(std::string_view bytes) override {
    if (bytes.empty()) return !c_->closed;
    {
      std::unique_lock<std::mutex> lock(c_->mutex);
      c_->drained.wait(lock, [&] { return c_->closed || c_->out.size() - c_->sent < kStreamBacklog; });
      if (c_->closed) return false;
      if (chunked_) c_->out += str(std::hex, bytes.size(), "\r\n");
      c_->out.append(bytes);
      if (chunked_) c_->out += "\r\n";
    }
    wake_(c_);
    return true;
  }

 private:
  ConnectionPtr c_;
  std::function<void(const ConnectionPtr&)> wake_;
  bool chunked_;
};

}  // namespace

struct Server::Loop {
  struct Job {
    ConnectionPtr connection;
    Request request;
    bool keep_alive;
    Clock::time_point arrived;
  };
  int epoll_fd = -1, wake_fd = -1;
  std::unordered_map<int, ConnectionPtr> connections;
  int max_connections = 0;
  // Every connection's unfinished request, read and not yet handled, together: one body is bounded
  // by max_body_bytes, and this bounds them all (400 connections each holding most of an 8 MiB body
  // took 3.3 GB).
  int64_t unfinished_bytes = 0, max_unfinished_bytes = 0;
  void hold(Connection& c, int64_t bytes) {
    unfinished_bytes += bytes - c.held;
    c.held = bytes;
  }
  // From the handlers' threads to the loop: connections with bytes to send.
  std::mutex ready_mutex;
  std::vector<ConnectionPtr> ready;
  // From the loop to the handlers.
  std::mutex jobs_mutex;
  std::condition_variable jobs_changed;
  std::deque<Job> jobs;
  bool workers_stop = false;

  ~Loop() {
    for (auto& [fd, c] : connections) ::close(fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
  }
  void wake(const ConnectionPtr& c) {
    {
      std::lock_guard<std::mutex> lock(ready_mutex);
      ready.push_back(c);
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
  }
  void watch(const Connection& c, uint32_t events, int op = EPOLL_CTL_MOD) {
    epoll_event e{};
    e.events = events;
    e.data.fd = c.fd;
    ::epoll_ctl(epoll_fd, op, c.fd, &e);
  }
  void close(const ConnectionPtr& c) {
    hold(*c, 0);
    {
      std::lock_guard<std::mutex> lock(c->mutex);
      c->closed = true;
    }
    c->drained.notify_all();
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    connections.erase(c->fd);
  }
};

void Server::bind() {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port = std::to_string(options_.port);
  const bool resolved = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found) == 0;
  int fd = -1;
  for (addrinfo* a = resolved ? found : nullptr; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    const int yes = 1;
    // SO_REUSEADDR: a restarted server takes its port back at once; not SO_REUSEPORT, under which
    // a second server on a busy port would share it instead of failing.
    if (fd >= 0 && (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) != 0 ||
                    ::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0)) {
      ::close(fd);
      fd = -1;
    }
  }
  if (found) freeaddrinfo(found);
  WEFT_CHECK(fd >= 0, IOError, "cannot listen on ", options_.host, ":", options_.port,
             ": the port is in use, or the address is not one of this machine's");
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  listen_fd_ = fd;
}

void Server::stop() {
  stopping_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void Server::serve() {
  WEFT_CHECK(listen_fd_ >= 0, ValueError, "serve() before bind()");
  // Each connection is a file descriptor: ask for as many as the hard limit allows, and keep 64
  // for the process's own files.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::max<rlim_t>(files.rlim_cur, std::min<rlim_t>(files.rlim_max, static_cast<rlim_t>(options_.max_connections) + 64));
  ::setrlimit(RLIMIT_NOFILE, &files);
  ::getrlimit(RLIMIT_NOFILE, &files);
  // A request's body is megabytes that live for one request. glibc serves such blocks from mmap,
  // but raises that threshold to the largest block freed, after which they come from its heaps
  // and stay resident once freed; a fixed threshold gives them back to the system.
  ::mallopt(M_MMAP_THRESHOLD, 256 << 10);
  auto loop = std::make_unique<Loop>();
  Loop& L = *loop;
  L.max_unfinished_bytes = std::max<int64_t>(kMaxUnfinishedBytes, 2 * options_.limits.max_body_bytes);
  L.max_connections = static_cast<int>(std::max<rlim_t>(1, std::min<rlim_t>(static_cast<rlim_t>(options_.max_connections),
                                                                              files.rlim_cur > 128 ? files.rlim_cur - 64 : files.rlim_cur / 2)));
  L.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  L.wake_fd = wake_fd_;
  WEFT_CHECK(L.epoll_fd >= 0, IOError, "cannot start the server's event loop: ", std::strerror(errno));
  for (int fd : {listen_fd_, L.wake_fd}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    ::epoll_ctl(L.epoll_fd, EPOLL_CTL_ADD, fd, &e);
  }
  loop_ = std::move(loop);

  const auto seconds = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  const auto read_timeout = seconds(options_.read_timeout_s), write_timeout = seconds(options_.write_timeout_s);
  const auto answered = [this](const Request& r, int status, Clock::time_point arrived) {
    if (options_.on_answered)
      options_.on_answered(r, status, std::chrono::duration<double>(Clock::now() - arrived).count());
  };
  // Queues a whole response (head and body) on a connection; the loop sends it.
  const auto queue = [&L](const ConnectionPtr& c, std::string bytes, bool done) {
    {
      std::lock_guard<std::mutex> lock(c->mutex);
      if (c->out.size() == c->sent) c->progress = Clock::now();
      c->out += bytes;
      c->response_done = done;
    }
    L.wake(c);
  };
  const auto start_reading = [&](const ConnectionPtr& c) {
    c->phase = Connection::Phase::reading;
    c->parser.reset();
    c->continue_sent = false;
    c->arrived = Clock::now();
    c->deadline = c->arrived + read_timeout;
    if (c->in.capacity() > kKeptCapacity && c->in.size() < kKeptCapacity) c->in.shrink_to_fit();
    L.watch(*c, EPOLLIN | EPOLLRDHUP);
  };
  // After an error the server closes the connection; reading on for a moment and dropping what
  // comes keeps the kernel from resetting it before the client has read the answer.
  const auto refuse = [&](const ConnectionPtr& c, int status, const std::string& message) {
    const Response r = refusal(status, message);
    c->keep_alive = false;
    c->phase = Connection::Phase::handling;
    queue(c, response_head(r, false) + r.body, true);
    answered(c->parser.request(), status, c->arrived);
  };

  // The handlers.
  std::vector<std::thread> workers;
  const auto stop_workers = [&] {
    {
      std::lock_guard<std::mutex> lock(L.jobs_mutex);
      L.workers_stop = true;
    }
    L.jobs_changed.notify_all();
    for (std::thread& t : workers) t.join();
  };
  const auto work = [&] {
      for (;;) {
        Loop::Job job;
        {
          std::unique_lock<std::mutex> lock(L.jobs_mutex);
          L.jobs_changed.wait(lock, [&] { return L.workers_stop || !L.jobs.empty(); });
          if (L.jobs.empty()) return;
          job = std::move(L.jobs.front());
          L.jobs.pop_front();
        }
        const Response r = answer(job.request);
        if (!r.stream) {
          queue(job.connection, response_head(r, job.keep_alive) + r.body, true);
        } else {
          // HTTP/1.0 has no chunks: the stream's end is the connection's (keep_alive is false).
          const bool chunked = job.request.minor_version >= 1;
          std::string head = response_head(r, job.keep_alive);
          if (!chunked) head.replace(head.find("Transfer-Encoding: chunked\r\n"), 28, "");
          queue(job.connection, head, false);
          ChunkWriter writer(job.connection, [&L](const ConnectionPtr& c) { L.wake(c); }, chunked);
          r.stream(writer);
          queue(job.connection, chunked ? "0\r\n\r\n" : "", true);
        }
        answered(job.request, r.status, job.arrived);
      }
  };
  // A thread the system will not start (a ulimit, or memory the KV cache took) ends the server
  // with the reason, after the ones already started, rather than std::terminate.
  try {
    for (int i = 0; i < std::max(1, options_.workers); ++i) workers.emplace_back(work);
  } catch (const std::system_error& e) {
    stop_workers();
    throw Error(str("cannot start the request threads: ", workers.size(), " of ", std::max(1, options_.workers),
                    " started before the system refused one (", e.what(), "); ask for fewer (--connections)"));
  }

  // Sends what is queued; true while the connection lives.
  const auto flush = [&](const ConnectionPtr& c) {
    std::unique_lock<std::mutex> lock(c->mutex);
    while (c->sent < c->out.size()) {
      const ssize_t n = ::send(c->fd, c->out.data() + c->sent, c->out.size() - c->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        lock.unlock();
        L.close(c);
        return false;
      }
      c->sent += static_cast<size_t>(n);
      c->progress = Clock::now();
    }
    const bool all_sent = c->sent == c->out.size();
    if (all_sent) {
      c->out.clear();
      c->sent = 0;
      if (c->out.capacity() > kKeptCapacity) c->out.shrink_to_fit();
    }
    const bool done = all_sent && c->response_done;
    lock.unlock();
    c->drained.notify_all();
    if (c->phase == Connection::Phase::lingering) return true;
    if (!done) {
      if (c->phase == Connection::Phase::handling) L.watch(*c, all_sent ? 0u : static_cast<uint32_t>(EPOLLOUT));
      return true;
    }
    if (c->keep_alive && !stopping_) {
      start_reading(c);
      return true;
    }
    if (c->keep_alive) {
      L.close(c);
      return false;
    }
    ::shutdown(c->fd, SHUT_WR);
    c->phase = Connection::Phase::lingering;
    c->deadline = Clock::now() + std::chrono::seconds(1);
    L.watch(*c, EPOLLIN | EPOLLRDHUP);
    return true;
  };

  // Parses what has been read; dispatches a whole request.
  const auto parse = [&](const ConnectionPtr& c) {
    const size_t used = c->parser.feed(c->in);
    c->in.erase(0, used);
    if (c->parser.failed()) return refuse(c, c->parser.error_status(), c->parser.error_message());
    if (c->parser.wants_continue() && !c->continue_sent) {
      c->continue_sent = true;
      queue(c, "HTTP/1.1 100 Continue\r\n\r\n", false);
    }
    if (!c->parser.complete()) return;
    Request request = std::move(c->parser.request());
    // HTTP/1.0 clients are answered once: a stream to them ends with the connection.
    c->keep_alive = request.keep_alive() && request.minor_version >= 1 && !stopping_;
    c->phase = Connection::Phase::handling;
    {
      std::lock_guard<std::mutex> lock(c->mutex);
      c->response_done = false;
    }
    L.watch(*c, 0);
    const Route* route = find(request);
    if (route && route->quick) {
      const Response r = answer(request);
      queue(c, response_head(r, c->keep_alive) + r.body, true);
      answered(request, r.status, c->arrived);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(L.jobs_mutex);
      L.jobs.push_back({c, std::move(request), c->keep_alive, c->arrived});
    }
    L.jobs_changed.notify_one();
  };

  const auto read_from = [&](const ConnectionPtr& c) {
    char buffer[64 << 10];
    for (;;) {
      const ssize_t n = ::recv(c->fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return L.close(c);
      if (c->phase == Connection::Phase::lingering) continue;
      if (c->in.empty() && c->parser.request().method.empty()) {
        c->arrived = Clock::now();
        c->deadline = c->arrived + read_timeout;
      }
      // A request's head and a small body always get in (a health check must), so the bound is
      // passed by at most that much a connection.
      if (c->held + n > static_cast<int64_t>(kKeptCapacity) && L.unfinished_bytes + n > L.max_unfinished_bytes) {
        const int64_t held_mib = L.unfinished_bytes >> 20;
        c->in = std::string();  // what this request had sent is dropped with it
        c->parser.reset();
        L.hold(*c, 0);
        return refuse(c, 503, str("the server holds ", held_mib, " MiB of requests still arriving, its limit; send "
                                  "this one again later"));
      }
      c->in.append(buffer, static_cast<size_t>(n));
      parse(c);
      const bool reading = c->phase == Connection::Phase::reading;
      L.hold(*c, reading ? static_cast<int64_t>(c->in.capacity() + c->parser.request().body.capacity()) : 0);
      if (!reading) return;  // the rest waits for the answer
    }
  };

  // At most 64 a turn, so that a flood of connections cannot keep the loop from reading the
  // requests of those it has already taken (and then close them as the longest waiting).
  const auto accept_some = [&] {
    for (int taken = 0; taken < 64; ++taken) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN (or out of descriptors, which the connection bound keeps from happening)
      }
      if (static_cast<int>(L.connections.size()) >= L.max_connections) {
        ConnectionPtr oldest;
        for (auto& [other_fd, other] : L.connections)
          if (other->phase == Connection::Phase::reading && (!oldest || other->deadline < oldest->deadline)) oldest = other;
        if (!oldest) {
          ::close(fd);
          continue;
        }
        L.close(oldest);
      }
      const int yes = 1;
      // Without TCP_NODELAY an answer written in two sends waits for the client's delayed ACK of
      // the first: 40 ms on Linux, more than a whole batch costs.
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      auto c = std::make_shared<Connection>(fd, options_.limits);
      c->arrived = Clock::now();
      L.connections.emplace(fd, c);
      L.watch(*c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
      start_reading(c);
    }
  };

  bool listening = true;
  Clock::time_point next_scan;
  std::vector<epoll_event> events(256);
  for (;;) {
    if (stopping_ && listening) {
      ::epoll_ctl(L.epoll_fd, EPOLL_CTL_DEL, listen_fd_, nullptr);
      ::close(listen_fd_);
      listen_fd_ = -1;
      listening = false;
    }
    // Deadlines, looked at every 50 ms rather than at every event.
    const Clock::time_point now = Clock::now();
    std::vector<ConnectionPtr> expired;
    if (now >= next_scan || stopping_) {
      next_scan = now + std::chrono::milliseconds(50);
      for (auto& [fd, c] : L.connections) {
        using Phase = Connection::Phase;
        if (c->phase == Phase::reading ? stopping_ || now >= c->deadline
                                       : c->phase == Phase::lingering && now >= c->deadline) {
          expired.push_back(c);
          continue;
        }
        std::lock_guard<std::mutex> lock(c->mutex);
        if (c->sent < c->out.size() && now - c->progress >= write_timeout) expired.push_back(c);
      }
    }
    for (const ConnectionPtr& c : expired) {
      // A request cut short by its deadline is answered 408 when it had begun, as nginx does.
      if (c->phase == Connection::Phase::reading && !stopping_ && (!c->in.empty() || !c->parser.request().method.empty())) {
        refuse(c, 408, str("the request did not arrive whole within ", options_.read_timeout_s, " s"));
        flush(c);
        continue;
      }
      L.close(c);
    }
    if (stopping_ && L.connections.empty()) break;
    const int n = ::epoll_wait(L.epoll_fd, events.data(), static_cast<int>(events.size()), 100);
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      const uint32_t what = events[static_cast<size_t>(i)].events;
      if (fd == listen_fd_) {
        accept_some();
      } else if (fd == L.wake_fd) {
        uint64_t count;
        [[maybe_unused]] const ssize_t r = ::read(L.wake_fd, &count, sizeof count);
        std::vector<ConnectionPtr> ready;
        {
          std::lock_guard<std::mutex> lock(L.ready_mutex);
          ready.swap(L.ready);
        }
        for (const ConnectionPtr& c : ready)
          if (L.connections.contains(c->fd) && L.connections.at(c->fd) == c && flush(c) &&
              c->phase == Connection::Phase::reading && !c->in.empty())
            parse(c);  // a pipelined request read before the answer went
      } else if (auto it = L.connections.find(fd); it != L.connections.end()) {
        const ConnectionPtr c = it->second;
        // A client gone while its request is handled: the handler's stream sees it at its next write.
        if ((what & (EPOLLHUP | EPOLLERR)) && c->phase == Connection::Phase::handling) {
          L.close(c);
          continue;
        }
        if (what & EPOLLOUT) {
          if (!flush(c)) continue;
          if (c->phase == Connection::Phase::reading && !c->in.empty()) parse(c);
        }
        if ((what & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && L.connections.contains(fd) &&
            c->phase != Connection::Phase::handling)
          read_from(c);
      }
    }
  }
  stop_workers();
  std::lock_guard<std::mutex> lock(L.ready_mutex);
  L.ready.clear();
}

}  // namespace weft::net
