// The HTTP server's request parser and its checks, without sockets: a request reads the same
// whatever pieces it arrives in, every limit is enforced while reading (before the bytes are
// kept), and the Host / Origin / Content-Type checks refuse what a browser page could send.
#include <gtest/gtest.h>

#include "weft/net/http.h"

namespace weft::net {
namespace {

struct Parsed {
  bool complete = false;
  int status = 0;  // when refused
  std::string message;
  Request request;
  size_t used = 0;
};

// Feeds `bytes` in pieces of `piece` bytes, keeping what the parser does not use, as the server does.
Parsed parse(const std::string& bytes, size_t piece = SIZE_MAX, Limits limits = {}) {
  RequestParser parser(limits);
  Parsed p;
  std::string kept;
  size_t given = 0;
  while (!parser.complete() && !parser.failed() && given < bytes.size()) {
    const size_t n = std::min(piece, bytes.size() - given);
    kept.append(bytes, given, n);
    given += n;
    const size_t used = parser.feed(kept);
    kept.erase(0, used);
    p.used = given - kept.size();
  }
  p.complete = parser.complete();
  p.status = parser.error_status();
  p.message = parser.error_message();
  p.request = parser.request();
  return p;
}

const std::string kPost = "POST /v1/predict?model=a%20b&x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                          "Content-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\": [1]}\n";

TEST(HttpParser, AnyPiecesReadTheSameRequest) {
  for (size_t piece : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, SIZE_MAX}) {
    const Parsed p = parse(kPost, piece);
    ASSERT_TRUE(p.complete) << piece << ": " << p.message;
    EXPECT_EQ(p.request.method, "POST");
    EXPECT_EQ(p.request.path, "/v1/predict");
    EXPECT_EQ(p.request.param("model"), "a b");
    EXPECT_EQ(p.request.param("x"), "1");
    EXPECT_EQ(p.request.param("y"), std::nullopt);
    EXPECT_EQ(*p.request.header("content-type"), "application/json");
    EXPECT_EQ(p.request.body, "{\"a\": [1]}\n");
    EXPECT_TRUE(p.request.keep_alive());
  }
}

TEST(HttpParser, ChunkedBodiesAreDecodedAndBoundedAfterDecoding) {
  const std::string chunked = "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "4;ext=1\r\n{\"a\"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\nTrailer: x\r\n\r\n";
  for (size_t piece : {size_t{1}, size_t{5}, SIZE_MAX}) {
    const Parsed p = parse(chunked + "GET /next", piece);
    ASSERT_TRUE(p.complete) << p.message;
    EXPECT_EQ(p.request.body, "{\"a\": 1}");
    EXPECT_EQ(p.used, chunked.size()) << "the pipelined request after it is left for the next parse";
  }
  Limits small;
  small.max_body_bytes = 6;
  const Parsed over = parse(chunked, 1, small);
  EXPECT_EQ(over.status, 413) << over.message;
  EXPECT_LT(over.request.body.size(), 7u);
  // A chunk size too large for 64 bits, and chunk data longer than its size.
  EXPECT_EQ(parse("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n").status, 400);
  EXPECT_EQ(parse("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n").status, 400);
}

TEST(HttpParser, EveryLimitIsEnforcedWhileReading) {
  Limits limits;
  limits.max_head_bytes = 1024;
  limits.max_headers = 8;
  limits.max_body_bytes = 100;
  // Header lines that never end: refused once the head is over its limit, not when it ends.
  const Parsed endless = parse("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(5000, 'a'), 100, limits);
  EXPECT_EQ(endless.status, 431);
  EXPECT_LE(endless.used, 0u) << "nothing of an unfinished head is used";
  std::string many = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 0; i < 9; ++i) many += "X" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(parse(many + "\r\n", SIZE_MAX, limits).status, 431);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n", SIZE_MAX, limits).status, 413);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n").status, 400);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\n").status, 400);
}

TEST(HttpParser, AmbiguousFramingAndEncodedBodiesAreRefused) {
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\n";
  EXPECT_EQ(parse(head + "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx").status, 400);
  EXPECT_EQ(parse(head + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n").status, 400);
  EXPECT_EQ(parse(head + "Transfer-Encoding: gzip, chunked\r\n\r\n").status, 501);
  EXPECT_EQ(parse(head + "Content-Encoding: gzip\r\nContent-Length: 1\r\n\r\nx").status, 415);
  EXPECT_EQ(parse(head + "\r\n").status, 411) << "a POST without a length is answered, not waited on";
  EXPECT_EQ(parse("GET / HTTP/1.1\r\n\r\n").status, 400) << "HTTP/1.1 without Host";
  EXPECT_EQ(parse("GET / HTTP/2.0\r\nHost: h\r\n\r\n").status, 505);
  EXPECT_EQ(parse("GET  / HTTP/1.1\r\nHost: h\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET http://evil/ HTTP/1.1\r\nHost: h\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: h\r\nX: a\x01" "b\r\n\r\n").status, 400);
  const Parsed old = parse("GET / HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(old.complete);
  EXPECT_FALSE(old.request.keep_alive());
}

TEST(HttpParser, ExpectContinueIsAskedOnlyBeforeTheBody) {
  RequestParser parser;
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  EXPECT_EQ(parser.feed(head), head.size());
  EXPECT_TRUE(parser.wants_continue());
  parser.feed("{}");
  EXPECT_TRUE(parser.complete());
  EXPECT_FALSE(parser.wants_continue());
}

Request request(const std::string& method, const std::string& path,
                std::vector<std::pair<std::string, std::string>> headers, std::string body = "") {
  Request r;
  r.method = method;
  r.path = r.target = path;
  r.headers = std::move(headers);
  r.body = std::move(body);
  return r;
}

Response text(std::string body) {
  Response r;
  r.body = std::move(body);
  return r;
}

TEST(HttpServer, HostOriginAndContentTypeKeepBrowserPagesOut) {
  ServerOptions options;
  options.allowed_origins = {"http://notebook:8888"};
  options.allowed_hosts = {"weft.internal"};
  Server server(options);
  server.get("/healthz", [](const Request&) { return text("ok"); });
  server.post("/v1/predict", [](const Request&) { return text("done"); });
  const auto status = [&](const Request& r) { return server.answer(r).status; };
  EXPECT_EQ(status(request("GET", "/healthz", {{"host", "127.0.0.1:8080"}})), 200);
  EXPECT_EQ(status(request("GET", "/healthz", {{"host", "localhost:8080"}})), 200);
  EXPECT_EQ(status(request("GET", "/healthz", {{"host", "[::1]:8080"}})), 200);
  EXPECT_EQ(status(request("GET", "/healthz", {{"host", "weft.internal"}})), 200);
  // DNS rebinding: a name the attacker's DNS points at 127.0.0.1.
  EXPECT_EQ(status(request("GET", "/healthz", {{"host", "evil.example:8080"}})), 403);
  // A page of another site, whether or not it sends JSON.
  const std::vector<std::pair<std::string, std::string>> json = {{"host", "127.0.0.1:8080"},
                                                                 {"content-type", "application/json"}};
  auto from = [&](std::string origin, std::string type = "application/json") {
    return request("POST", "/v1/predict", {{"host", "127.0.0.1:8080"}, {"origin", origin}, {"content-type", type}}, "{}");
  };
  EXPECT_EQ(status(from("http://evil.example")), 403);
  EXPECT_EQ(status(from("null")), 403);
  EXPECT_EQ(status(from("http://127.0.0.1:8080")), 200) << "the server's own page";
  const Response allowed = server.answer(from("http://notebook:8888"));
  EXPECT_EQ(allowed.status, 200);
  EXPECT_NE(std::find(allowed.headers.begin(), allowed.headers.end(),
                      std::pair<std::string, std::string>("Access-Control-Allow-Origin", "http://notebook:8888")),
            allowed.headers.end());
  // A form or a text/plain fetch needs no preflight: refused for not being JSON.
  EXPECT_EQ(status(request("POST", "/v1/predict", {{"host", "127.0.0.1:8080"}, {"content-type", "text/plain"}}, "{}")), 415);
  EXPECT_EQ(status(request("POST", "/v1/predict", {{"host", "127.0.0.1:8080"}}, "{}")), 415);
  EXPECT_EQ(status(request("POST", "/v1/predict", {{"host", "127.0.0.1"}, {"content-type", "application/json; charset=utf-8"}}, "{}")), 200);
  EXPECT_EQ(status(request("GET", "/v1/predict", json)), 405);
  EXPECT_EQ(status(request("GET", "/nowhere", json)), 404);
}

}  // namespace
}  // namespace weft::net
