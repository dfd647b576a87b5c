// `weft serve`: REST inference over HTTP (net/http.h) for the checkpoints weft writes, the image
// classifiers (f32, bf16, int8, int4) and the GPT, loaded through infer::load_model.
//
//   GET  /healthz          200 once the models are loaded
//   GET  /v1/models        each model: name, kind, dtype, quantization, input shape, parameters,
//                          labels, the checkpoint's metadata
//   POST /v1/predict       classifiers: {"inputs": [[784 pixels 0-255], ...], "top_k": 3, "model": name}
//                          -> per input the class probabilities and the top-k labels with names
//   POST /v1/completions   GPT: {"prompt", "max_tokens", "temperature", "top_k", "seed", "stream",
//                          "model"} -> the text and token counts; "stream": true sends each token
//                          as a server-sent event as it is drawn
//   GET  /metrics          Prometheus text (serve/metrics.h)
//   GET  /                 the playground page (serve/playground.h)
//   GET  /v1/examples?model=NAME   a classifier's test images to try, two of each class, from
//                          --data-dir (by default its data set's, as weft eval reads) when readable
//
// Pixels are sent as the data set holds them; the server applies the normalisation the model was
// trained with (from the checkpoint), so its answer is what `weft eval` computes for the image.
// Classifier requests go through a DynamicBatcher per model (serve/batcher.h), a GPT's through a
// ContinuousBatcher (serve/continuous.h): its generations decode together, joining and leaving
// the running batch between steps.
//
// Errors are JSON, {"error": {"status": 400, "message": "..."}}: malformed JSON (nested more than
// 8 deep, a key twice, a number out of range), wrong shapes, types or values, an unknown model →
// 400; a request from another site's page → 403; an unknown route → 404; a body over the limit →
// 413; a body that is not application/json → 415; a full queue → 503 with Retry-After. None of
// them touches another request's answer. What a client can cost the server (time, connections,
// bytes) is bounded as net/http.h says.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/net/http.h"
#include "weft/serve/batcher.h"
#include "weft/serve/metrics.h"


namespace weft::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (port() says which)
  BatchOptions batch;
  std::string precision;           // "" as saved; fp32 | bf16 converts a classifier's weights
  int64_t max_body_bytes = 8 << 20;
  int connections = 128;           // requests handled at once (a worker thread each)
  int max_connections = 1024;      // open at once; one more closes the longest idle
  double timeout_s = 5;            // reading a request, writing a response
  std::vector<std::string> allowed_hosts;    // Host names besides the bound address (a proxy's)
  std::vector<std::string> allowed_origins;  // web pages (origins) allowed to call the API
  std::string data_dir;            // the classifiers' test images for the playground; "": the default
};

struct ModelSpec {
  std::string name;  // "" → the model's kind (mlp, cnn, gpt)
  std::string path;
};
// "NAME=PATH" or "PATH" (a path holding '=' names it: "=PATH" keeps the whole of PATH).
ModelSpec parse_model_spec(const std::string& text);

class Server {
 public:
  // Loads every model; a missing or corrupt checkpoint, two models of one name, or a precision a
  // model cannot run → IOError / FormatError / ValueError before anything is served.
  Server(const std::vector<ModelSpec>& models, ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; IOError naming the address when it cannot (in use, not an address here).
  void bind();
  int port() const;
  // One line for the user: the address, and each model with its dtype.
  std::string ready_line() const;
  // The models' names, in the order given, joined by commas.
  std::string model_names() const;
  // Serves until stop(); returns once every request in flight has been answered.
  void serve();
  // From any thread: stop accepting connections; serve() returns when the rest are answered.
  void stop();
  // A whole request answered without a socket (the fuzz target's way in).
  net::Response answer(const net::Request& request) const;

 private:
  struct Model;
  void add_routes();
  // The routes' handlers, by what they answer (the list above).
  net::Response list_models(const net::Request& req) const;
  net::Response predict(const net::Request& req);
  net::Response complete(const net::Request& req);
  net::Response examples(const net::Request& req);
  net::Response render_metrics(const net::Request& req) const;
  // The model `name`d, or else the only one of the kind (a GPT or a classifier) the route serves.
  Model& model_for(const std::optional<std::string>& name, bool gpt);

  ServeOptions options_;
  std::vector<std::unique_ptr<Model>> models_;
  Metrics metrics_;
  std::unique_ptr<net::Server> http_;
};

}  // namespace weft::serve
