// weft serve's HTTP API, in process on a free port: the answers are the models' own (the
// classifier's on Fashion-MNIST test images, the GPT's generate), batching happens under
// concurrent load, every bad request gets its status and a JSON error without touching the good
// answers around it, a full queue answers 503, and the metrics pass promtool.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/infer/load.h"
#include "weft/infer/metadata.h"
#include "weft/io/safetensors.h"
#include "weft/nn/generate.h"
#include "weft/nn/models.h"
#include "weft/ops/activation.h"
#include "weft/serve/server.h"
#include "weft/train/image_task.h"

namespace weft::serve {
namespace {

using Json = nlohmann::json;
using testing::contains;

const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

void save_model(const std::string& file, const nn::Module& model, std::map<std::string, std::string> metadata) {
  nn::StateDict state = model.state_dict();
  metadata["format"] = "pt";
  io::save_safetensors(file, {state.begin(), state.end()}, metadata);
}

// A trained-looking MLP is not needed: a seeded one answers deterministically all the same.
std::string save_mlp(const testing::TempDir& dir) {
  manual_seed(3);
  auto mlp = nn::make_mlp();
  auto metadata = infer::classifier_metadata("fashion-mnist");
  metadata["weft.model"] = "mlp";
  save_model(dir.file("mlp.safetensors"), *mlp, metadata);
  return dir.file("mlp.safetensors");
}

std::string save_gpt(const testing::TempDir& dir) {
  manual_seed(4);
  nn::GPT gpt(nn::GPTConfig{.layers = 2, .heads = 2, .dim = 32, .context = 32, .vocab = 256});
  auto metadata = infer::gpt_metadata(gpt.config, data::ByteTokenizer());
  metadata["weft.model"] = "gpt";
  save_model(dir.file("gpt.safetensors"), gpt, metadata);
  return dir.file("gpt.safetensors");
}

// A server on a free loopback port, serving on a thread until the test ends.
class Running {
 public:
  Running(const std::vector<ModelSpec>& models, ServeOptions options) : server_(models, with_free_port(options)) {
    server_.bind();
    thread_ = std::thread([this] { server_.serve(); });
  }
  ~Running() {
    server_.stop();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server_.port());
    c.set_read_timeout(30, 0);
    return c;
  }
  Server& server() { return server_; }

 private:
  static ServeOptions with_free_port(ServeOptions o) {
    o.port = 0;
    return o;
  }
  Server server_;
  std::thread thread_;
};

struct Answer {
  int status = 0;
  Json body;
  std::string retry_after;
};

Answer post(const Running& running, const std::string& path, const std::string& body) {
  httplib::Client c = running.client();
  const httplib::Result r = c.Post(path.c_str(), body, "application/json");
  if (!r) return {-1, Json{{"error", {{"status", -1}, {"message", httplib::to_string(r.error())}}}}, {}};
  return {r->status, Json::parse(r->body, nullptr, false), r->get_header_value("Retry-After")};
}

// Test images as the data set holds them, and the f32 inputs weft eval feeds the model.
struct TestImages {
  std::vector<std::vector<int>> pixels;
  Tensor inputs;
};
TestImages test_images(int64_t n) {
  const data::ImageDataset test = train::load_image_dataset("fashion-mnist", kFashionMnist, false);
  TestImages t;
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < n; ++i) {
    indices.push_back(i * 7);
    const std::vector<uint8_t> bytes = test.images().select(0, i * 7).contiguous().to_vector<uint8_t>();
    t.pixels.emplace_back(bytes.begin(), bytes.end());
  }
  t.inputs = test.get_batch(indices).inputs;
  return t;
}

TEST(Serve, PredictionsAreTheModelsOnTestImagesAlsoWhenBatchedTogether) {
  testing::TempDir dir;
  const std::string file = save_mlp(dir);
  const TestImages images = test_images(12);
  // The model itself on the data set's inputs: what weft eval computes.
  infer::LoadedModel loaded = infer::load_model(file);
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = softmax((*loaded.model)(images.inputs), -1);
  }
  // Batches of up to 8 gathered over 50 ms: 12 concurrent requests of one image run in a few.
  ServeOptions options;
  options.batch.max_batch = 8;
  options.batch.max_wait_ms = 50;
  Running running({{"", file}}, options);
  std::vector<std::future<Answer>> answers;
  for (size_t i = 0; i < images.pixels.size(); ++i)
    answers.push_back(std::async(std::launch::async, [&, i] {
      return post(running, "/v1/predict", Json{{"inputs", {images.pixels[i]}}, {"top_k", 3}}.dump());
    }));
  for (size_t i = 0; i < answers.size(); ++i) {
    const Answer a = answers[i].get();
    ASSERT_EQ(a.status, 200) << a.body.dump();
    const Json& p = a.body["predictions"][0];
    const std::vector<float> want = expected.select(0, static_cast<int64_t>(i)).to_vector<float>();
    ASSERT_EQ(p["probabilities"].size(), want.size());
    for (size_t c = 0; c < want.size(); ++c) EXPECT_NEAR(p["probabilities"][c].get<double>(), want[c], 1e-5);
    const int64_t best = std::max_element(want.begin(), want.end()) - want.begin();
    EXPECT_EQ(p["top_k"][0]["label"], best);
    EXPECT_EQ(p["top_k"][0]["name"], loaded.labels[static_cast<size_t>(best)]);
    EXPECT_EQ(p["top_k"].size(), 3u);
  }
  // Several images in one request answer in order.
  const Answer together = post(running, "/v1/predict", Json{{"inputs", images.pixels}}.dump());
  ASSERT_EQ(together.status, 200);
  for (size_t i = 0; i < images.pixels.size(); ++i)
    EXPECT_NEAR(together.body["predictions"][i]["probabilities"][0].get<double>(),
                expected.select(0, static_cast<int64_t>(i)).to_vector<float>()[0], 1e-5);
  // The batches formed: fewer forward passes than requests.
  const std::string metrics = running.client().Get("/metrics")->body;
  const std::string count = "weft_batch_size_count{model=\"mlp\"} ";
  const size_t at = metrics.find(count);
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_LT(std::stoi(metrics.substr(at + count.size())), 12 + 1) << metrics;
  EXPECT_TRUE(contains(metrics, "weft_batch_size_bucket{model=\"mlp\",le=\"1\"}")) << metrics;
}

TEST(Serve, BadRequestsGetTheirStatusAndTheGoodOnesAroundThemTheirAnswers) {
  testing::TempDir dir;
  const std::string mlp = save_mlp(dir), gpt = save_gpt(dir);
  const TestImages images = test_images(2);
  ServeOptions options;
  options.max_body_bytes = 64 << 10;
  Running running({{"", mlp}, {"lm", gpt}}, options);
  const std::string good = Json{{"inputs", {images.pixels[0]}}}.dump();
  const Answer single = post(running, "/v1/predict", good);
  ASSERT_EQ(single.status, 200);
  std::vector<int> bad_pixels(784, 0);
  bad_pixels[5] = 256;
  const std::vector<std::tuple<std::string, std::string, int, std::string>> bad = {
      {"/v1/predict", "{\"inputs\": [[1, 2", 400, "the body is not valid JSON"},
      {"/v1/predict", "[1, 2]", 400, "must be a JSON object"},
      {"/v1/predict", "{}", 400, "\"inputs\""},
      {"/v1/predict", "{\"inputs\": [[1, 2, 3]]}", 400, "784 pixel values"},
      {"/v1/predict", "{\"inputs\": [\"cat\"]}", 400, "784 pixel values"},
      {"/v1/predict", Json{{"inputs", {bad_pixels}}}.dump(), 400, "integers from 0 to 255"},
      {"/v1/predict", "{\"inputs\": [[" + std::string(783 * 2, ' ') + "]]}", 400, "784"},
      {"/v1/predict", Json{{"inputs", {images.pixels[1]}}, {"top_k", 11}}.dump(), 400, "\"top_k\""},
      {"/v1/predict", Json{{"inputs", {images.pixels[1]}}, {"model", "resnet"}}.dump(), 400, "no model named 'resnet'"},
      {"/v1/predict", Json{{"inputs", {images.pixels[1]}}, {"model", "lm"}}.dump(), 400, "is not a classifier"},
      {"/v1/predict", "{\"inputs\": [[" + std::string(70000, '1') + "]]}", 413, "over the server's limit"},
      {"/v1/nowhere", "{}", 404, "no route POST '/v1/nowhere'"},
      {"/v1/completions", Json{{"prompt", std::string(40, 'a')}}.dump(), 400, "the model's context is 32"},
      {"/v1/completions", Json{{"prompt", ""}}.dump(), 400, "non-empty string"},
      {"/v1/completions", Json{{"prompt", "hi"}, {"max_tokens", -1}}.dump(), 400, "\"max_tokens\""},
      {"/v1/completions", Json{{"prompt", "hi"}, {"temperature", "hot"}}.dump(), 400, "\"temperature\""},
      {"/v1/completions", Json{{"prompt", "hi"}, {"stream", 1}}.dump(), 400, "\"stream\""},
  };
  // Every bad request fired three times among twenty good ones, all at once.
  std::vector<std::future<Answer>> good_answers, bad_answers;
  for (int round = 0; round < 3; ++round) {
    for (const auto& [path, body, status, says] : bad)
      bad_answers.push_back(std::async(std::launch::async, [&, path = path, body = body] { return post(running, path, body); }));
    for (int i = 0; i < 7; ++i)
      good_answers.push_back(std::async(std::launch::async, [&] { return post(running, "/v1/predict", good); }));
  }
  for (size_t i = 0; i < bad_answers.size(); ++i) {
    const auto& [path, body, status, says] = bad[i % bad.size()];
    const Answer a = bad_answers[i].get();
    EXPECT_EQ(a.status, status) << path << " " << body.substr(0, 80) << ": " << a.body.dump();
    EXPECT_EQ(a.body["error"]["status"], status) << a.body.dump();
    EXPECT_TRUE(contains(a.body["error"]["message"].get<std::string>(), says)) << a.body.dump();
  }
  // Batched with others, a request's rows go through other GEMM blockings: the same to rounding.
  for (auto& f : good_answers) {
    const Answer a = f.get();
    ASSERT_EQ(a.status, 200) << a.body.dump();
    const Json &got = a.body["predictions"][0], &want = single.body["predictions"][0];
    for (size_t c = 0; c < 10; ++c)
      EXPECT_NEAR(got["probabilities"][c].get<double>(), want["probabilities"][c].get<double>(), 1e-6);
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(got["top_k"][k]["label"], want["top_k"][k]["label"]);
  }
}

// A client that sends half a body and stalls, and one that leaves in the middle of a stream, hold
// up nobody: the others are answered meanwhile, and the stalled request is refused after the
// timeout.
TEST(Serve, SlowAndVanishingClientsHoldUpNobody) {
  testing::TempDir dir;
  ServeOptions options;
  options.timeout_s = 2;
  Running running({{"", save_mlp(dir)}, {"", save_gpt(dir)}}, options);
  const int port = running.server().port();
  auto connect_raw = [port] {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    return fd;
  };
  const int slow = connect_raw();
  const std::string head = "POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: 5000\r\n\r\n{\"inputs\": [[1, 2";
  ASSERT_EQ(send(slow, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  // Meanwhile, others are answered at once.
  const auto start = std::chrono::steady_clock::now();
  const std::string good = Json{{"inputs", {std::vector<int>(784, 9)}}}.dump();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(post(running, "/v1/predict", good).status, 200);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.8);
  // After the timeout the stalled request is answered 408, and its connection closed.
  timeval wait{.tv_sec = 5, .tv_usec = 0};
  setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  std::string answer;
  char buffer[512];
  for (ssize_t got; (got = recv(slow, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, static_cast<size_t>(got));
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 408")) << answer;
  EXPECT_TRUE(contains(answer, "did not arrive whole within 2 s")) << answer;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 6.0);
  close(slow);
  // A stream abandoned after its first event: the next request is served.
  const int leaving = connect_raw();
  const std::string body = Json{{"prompt", "x"}, {"max_tokens", 30}, {"stream", true}}.dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(leaving, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  ASSERT_GT(recv(leaving, buffer, sizeof buffer, 0), 0);
  close(leaving);
  EXPECT_EQ(post(running, "/v1/completions", Json{{"prompt", "y"}, {"max_tokens", 3}}.dump()).status, 200);
}

TEST(Serve, AFullQueueAnswers503WithRetryAfter) {
  testing::TempDir dir;
  ServeOptions options;
  options.batch.max_queue = 1;
  options.batch.max_batch = 64;
  options.batch.max_wait_ms = 3000;  // the first request waits there while the second arrives
  Running running({{"", save_mlp(dir)}}, options);
  const std::string body = Json{{"inputs", {std::vector<int>(784, 0)}}}.dump();
  std::future<Answer> first = std::async(std::launch::async, [&] { return post(running, "/v1/predict", body); });
  while (!contains(running.client().Get("/metrics")->body, "weft_queue_depth{model=\"mlp\"} 1"))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const Answer second = post(running, "/v1/predict", body);
  EXPECT_EQ(second.status, 503) << second.body.dump();
  EXPECT_EQ(second.retry_after, "1");
  EXPECT_TRUE(contains(second.body["error"]["message"].get<std::string>(), "queue is full")) << second.body.dump();
  EXPECT_EQ(first.get().status, 200);
}

TEST(Serve, CompletionsAreGeneratesAndStreamTheSameTokens) {
  testing::TempDir dir;
  const std::string file = save_gpt(dir);
  infer::LoadedModel loaded = infer::load_model(file);
  nn::GenerateOptions o;
  o.max_tokens = 12;
  o.temperature = 0.8;
  o.top_k = 20;
  o.seed = 5;
  o.vocab_limit = 256;
  const std::string prompt = "The cat";
  const std::vector<int64_t> ids(prompt.begin(), prompt.end());
  const std::vector<int64_t> expected = nn::generate(*loaded.gpt, ids, o);
  Running running({{"", file}}, {});
  const Json request = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0.8}, {"top_k", 20}, {"seed", 5}};
  const Answer whole = post(running, "/v1/completions", request.dump());
  ASSERT_EQ(whole.status, 200) << whole.body.dump();
  EXPECT_EQ(whole.body["prompt_tokens"], 7);
  EXPECT_EQ(whole.body["completion_tokens"], 12);
  // The bytes a random model draws need not be UTF-8: JSON carries them with U+FFFD in their place.
  const std::string text(expected.begin(), expected.end());
  EXPECT_EQ(whole.body["text"], Json::parse(Json(text).dump(-1, ' ', false, Json::error_handler_t::replace)));
  // Streamed: one event per token, in order, then the whole text and the counts.
  Json streamed = request;
  streamed["stream"] = true;
  httplib::Client c = running.client();
  std::string events;
  const httplib::Result r = c.Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::vector<int64_t> tokens;
  Json last;
  for (size_t at = 0; (at = r->body.find("data: ", at)) != std::string::npos; at += 6) {
    const Json event = Json::parse(r->body.substr(at + 6, r->body.find("\n\n", at) - at - 6));
    if (event.contains("token")) tokens.push_back(event["token"]);
    last = event;
  }
  EXPECT_EQ(tokens, expected);
  EXPECT_EQ(last["done"], true);
  EXPECT_EQ(last["completion_tokens"], 12);
  EXPECT_EQ(last["text"], whole.body["text"]);
  // A greedy request without a seed is repeatable.
  EXPECT_EQ(post(running, "/v1/completions", Json{{"prompt", "ab"}, {"temperature", 0}}.dump()).body,
            post(running, "/v1/completions", Json{{"prompt", "ab"}, {"temperature", 0}}.dump()).body);
}

// A request that sets nothing but the prompt samples as `weft generate` does without flags: the
// defaults are GenerateOptions', one set for both (until the context is full, temperature 0.8).
TEST(Serve, CompletionsDefaultToGeneratesDefaults) {
  testing::TempDir dir;
  const std::string file = save_gpt(dir);
  infer::LoadedModel loaded = infer::load_model(file);
  const std::string prompt = "The cat";
  const std::vector<int64_t> ids(prompt.begin(), prompt.end());
  const std::vector<int64_t> expected = nn::generate(*loaded.gpt, ids, {.vocab_limit = 256});
  ASSERT_EQ(std::ssize(expected), 32 - 7);
  Running running({{"", file}}, {});
  const Answer answer = post(running, "/v1/completions", Json{{"prompt", prompt}}.dump());
  ASSERT_EQ(answer.status, 200) << answer.body.dump();
  EXPECT_EQ(answer.body["completion_tokens"], 32 - 7);
  const std::string text(expected.begin(), expected.end());
  EXPECT_EQ(answer.body["text"], Json::parse(Json(text).dump(-1, ' ', false, Json::error_handler_t::replace)));
}

// Eight streams at once decode together (continuous batching): each gets the tokens generate
// gives it alone, and the decode steps ran several sequences at a time.
TEST(Serve, ConcurrentCompletionsDecodeTogetherAndEachGetsItsOwnTokens) {
  testing::TempDir dir;
  const std::string file = save_gpt(dir);
  infer::LoadedModel loaded = infer::load_model(file);
  Running running({{"", file}}, {});
  std::vector<Json> requests;
  std::vector<Json> expected;
  for (int i = 0; i < 8; ++i) {
    const std::string prompt = std::string("request ") + std::string(static_cast<size_t>(i), '+');
    nn::GenerateOptions o;
    o.max_tokens = 10 + i;
    o.temperature = 0.7;
    o.seed = static_cast<uint64_t>(100 + i);
    o.vocab_limit = 256;
    const std::vector<int64_t> tokens = nn::generate(*loaded.gpt, std::vector<int64_t>(prompt.begin(), prompt.end()), o);
    expected.push_back(Json::parse(
        Json(std::string(tokens.begin(), tokens.end())).dump(-1, ' ', false, Json::error_handler_t::replace)));
    requests.push_back({{"prompt", prompt}, {"max_tokens", *o.max_tokens}, {"temperature", 0.7}, {"seed", o.seed}});
  }
  std::vector<std::future<Answer>> answers;
  for (const Json& r : requests)
    answers.push_back(std::async(std::launch::async, [&running, r] { return post(running, "/v1/completions", r.dump()); }));
  for (size_t i = 0; i < answers.size(); ++i) {
    const Answer a = answers[i].get();
    ASSERT_EQ(a.status, 200) << a.body.dump();
    EXPECT_EQ(a.body["text"], expected[i]) << "request " << i;
    EXPECT_EQ(a.body["completion_tokens"], 10 + static_cast<int>(i));
  }
  const std::string metrics = running.client().Get("/metrics")->body;
  const std::string sum = "weft_batch_size_sum{model=\"gpt\"} ", count = "weft_batch_size_count{model=\"gpt\"} ";
  ASSERT_NE(metrics.find(sum), std::string::npos) << metrics;
  const double sequences = std::stod(metrics.substr(metrics.find(sum) + sum.size()));
  const double steps = std::stod(metrics.substr(metrics.find(count) + count.size()));
  EXPECT_GT(sequences / steps, 1.5) << "decode steps averaged " << sequences / steps << " sequences: " << metrics;
}

TEST(Serve, MetricsPassPromtoolAndCountWhatHappened) {
  testing::TempDir dir;
  Running running({{"", save_mlp(dir)}, {"", save_gpt(dir)}}, {});
  const TestImages images = test_images(4);
  ASSERT_EQ(post(running, "/v1/predict", Json{{"inputs", images.pixels}}.dump()).status, 200);
  ASSERT_EQ(post(running, "/v1/predict", "{").status, 400);
  ASSERT_EQ(post(running, "/v1/completions", Json{{"prompt", "hi"}, {"max_tokens", 5}}.dump()).status, 200);
  ASSERT_EQ(running.client().Get("/nowhere")->status, 404);
  // A request is counted once its answer is written, which its client may read first: the scrape
  // waits until the last one is in.
  const std::vector<std::string> counted = {"weft_requests_total{route=\"/v1/predict\",status=\"200\"} 1",
                                            "weft_requests_total{route=\"/v1/predict\",status=\"400\"} 1",
                                            "weft_requests_total{route=\"other\",status=\"404\"} 1"};
  std::string metrics;
  for (int attempt = 0; attempt < 500; ++attempt) {
    metrics = running.client().Get("/metrics")->body;
    if (std::all_of(counted.begin(), counted.end(), [&](const std::string& line) { return contains(metrics, line); }))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const std::string& line : counted) EXPECT_TRUE(contains(metrics, line)) << metrics;
  EXPECT_TRUE(contains(metrics, "weft_generated_tokens_total{model=\"gpt\"} 5")) << metrics;
  EXPECT_TRUE(contains(metrics, "weft_batch_size_sum{model=\"mlp\"} 4")) << metrics;
  EXPECT_TRUE(contains(metrics, "weft_queue_depth{model=\"mlp\"} 0")) << metrics;
  testing::TempDir scrape;
  {
    std::FILE* f = std::fopen(scrape.file("metrics.txt").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fwrite(metrics.data(), 1, metrics.size(), f);
    std::fclose(f);
  }
  const std::string command = "promtool check metrics < " + scrape.file("metrics.txt") + " 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string said;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) said.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << "promtool (Debian's prometheus package, scripts/setup) said: " << said;
}

TEST(Serve, DriftComparesRecentPredictionsWithTheTestSetsClasses) {
  testing::TempDir dir;
  manual_seed(3);
  auto mlp = nn::make_mlp();
  auto metadata = infer::classifier_metadata("fashion-mnist");
  metadata["weft.model"] = "mlp";
  // A test set all of class 0: predictions spread over the classes are far from it.
  std::vector<double> all_zero(10, 0.0);
  all_zero[0] = 1;
  metadata.merge(infer::class_distribution_metadata(all_zero));
  save_model(dir.file("mlp.safetensors"), *mlp, metadata);
  Running running({{"", dir.file("mlp.safetensors")}}, {});
  EXPECT_FALSE(contains(running.client().Get("/metrics")->body, "weft_prediction_drift{"));
  const Answer a = post(running, "/v1/predict", Json{{"inputs", test_images(20).pixels}}.dump());
  ASSERT_EQ(a.status, 200);
  int class0 = 0;
  for (const Json& p : a.body["predictions"]) class0 += p["top_k"][0]["label"] == 0;
  const std::string metrics = running.client().Get("/metrics")->body;
  const std::string drift = "weft_prediction_drift{model=\"mlp\"} ";
  const size_t at = metrics.find(drift);
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_NEAR(std::stod(metrics.substr(at + drift.size())), 1.0 - class0 / 20.0, 1e-9);
}

TEST(Serve, ModelsThatCannotBeServedAreRefusedBeforeAnything) {
  testing::TempDir dir;
  const std::string gpt = save_gpt(dir);
  EXPECT_THROW(Server({{"", dir.file("missing.safetensors")}}, {}), IOError);
  {
    std::FILE* f = std::fopen(dir.file("corrupt.safetensors").c_str(), "w");
    std::fputs("not a safetensors file", f);
    std::fclose(f);
  }
  EXPECT_THROW(Server({{"", dir.file("corrupt.safetensors")}}, {}), FormatError);
  EXPECT_THROW(Server({{"", gpt}, {"", gpt}}, {}), ValueError);
  ServeOptions bf16;
  bf16.precision = "bf16";
  EXPECT_TRUE(contains(testing::message_of<ValueError>([&] { Server({{"", gpt}}, bf16); }), "which weft serves"));
  // A port another server holds.
  Running first({{"", gpt}}, {});
  ServeOptions same;
  same.port = first.server().port();
  Server second({{"", gpt}}, same);
  EXPECT_TRUE(contains(testing::message_of<IOError>([&] { second.bind(); }), "cannot listen on 127.0.0.1:"));
  ServeOptions elsewhere;
  elsewhere.host = "192.0.2.1";  // TEST-NET-1: no machine's own address
  Server third({{"", gpt}}, elsewhere);
  EXPECT_TRUE(contains(testing::message_of<IOError>([&] { third.bind(); }), "cannot listen on 192.0.2.1:8080"));
}

}  // namespace
}  // namespace weft::serve
