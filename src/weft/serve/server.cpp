#include "weft/serve/server.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "weft/core/threads.h"
#include "weft/infer/load.h"
#include "weft/infer/metadata.h"
#include "weft/infer/predict.h"
#include "weft/io/json.h"
#include "weft/monitor/status_file.h"
#include "weft/serve/continuous.h"
#include "weft/serve/playground.h"

namespace weft::serve {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A request the server answers with `status` and a message, as JSON.
class HttpError : public Error {
 public:
  HttpError(int status, const std::string& message) : Error(message), status(status) {}
  const int status;
};

// Predictions kept for the drift gauge.
constexpr size_t kRecentPredictions = 1000;

// The tokens of one streamed generation, handed from the model's thread to the HTTP worker that
// writes them.
struct TokenStream {
  bool streamed = false;  // the worker waits for each token; else only for the end
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<int64_t> tokens;
  bool done = false;
  std::string error;
  std::atomic<bool> cancelled{false};  // the client went away: stop generating
};

// A JSON body nests this deep at most: {"inputs": [[pixels]]} is 3.
constexpr int kMaxBodyDepth = 8;
// SentencePiece pieces are at most 16 characters (its trainer's default, which weft keeps), 64
// bytes of UTF-8, and a byte-level token is one byte; so a prompt of more bytes than this per
// token of context cannot fit, and is refused before it is tokenized.
constexpr int64_t kPromptBytesPerToken = 64;

// Values a body's JSON tree may keep (pixels read by a PixelReader are not kept): a tree costs
// about 100 bytes a value, and 8 MB of {"k0":0,"k1":0,...} built 120 MB that stayed resident.
constexpr int64_t kMaxBodyValues = 16384;

// A body parsed as the JSON reader of files parses: nesting bounded (nlohmann's dump and
// comparison recurse once per level), duplicate keys and out-of-range numbers refused, and the
// values kept counted, all before anything is built from it or quoted back.
Json parse_body(const net::Request& req, const Json::parser_callback_t& on_value = nullptr) {
  int64_t kept = 0;
  const Json::parser_callback_t bounded = [&](int depth, Json::parse_event_t event, Json& parsed) {
    const bool keep = !on_value || on_value(depth, event, parsed);
    if (keep && (event == Json::parse_event_t::value || event == Json::parse_event_t::key) && ++kept > kMaxBodyValues)
      throw HttpError(400, str("the body holds more than ", kMaxBodyValues, " JSON values"));
    return keep;
  };
  Json body = io::parse_json(req.body, "the body", kMaxBodyDepth, bounded);
  if (!body.is_object()) throw HttpError(400, "the body must be a JSON object");
  return body;
}

// The pixels of a predict request's "inputs", taken out of the JSON as the parser reads them: a
// batch of images held as a JSON tree is a 16-byte node and more per pixel, and building and
// freeing that tree cost more than the model's forward at --max-batch 32. The images' arrays stay
// in the tree, empty, so the body's shape is checked as any other.
struct PixelReader {
  std::vector<uint8_t> values;       // every valid pixel, image after image
  std::vector<int64_t> counts;       // per array (or object) in "inputs": the values it held
  int64_t first_bad_image = -1;      // the first image holding something not a pixel
  std::string first_bad;             // that thing, as JSON

  Json::parser_callback_t callback() {
    return [this, in_inputs = false](int depth, Json::parse_event_t event, Json& parsed) mutable {
      using E = Json::parse_event_t;
      if (depth == 1 && event == E::key) in_inputs = parsed == "inputs";
      if (!in_inputs) return true;
      if (depth == 2 && (event == E::array_start || event == E::object_start)) counts.push_back(0);
      if (depth != 3 || event == E::array_start || event == E::object_start || event == E::key) return true;
      ++counts.back();
      const double x = parsed.is_number() ? parsed.get<double>() : NAN;
      if (x >= 0 && x <= 255 && x == std::floor(x)) {
        values.push_back(static_cast<uint8_t>(x));
      } else if (first_bad_image < 0) {
        first_bad_image = static_cast<int64_t>(counts.size()) - 1;
        first_bad = io::json_excerpt(parsed);
      }
      return false;  // not kept in the tree
    };
  }
};

// body[key] as an integer in [min, max], or `fallback` when absent.
int64_t integer_field(const Json& body, const char* key, int64_t fallback, int64_t min, int64_t max) {
  if (!body.contains(key)) return fallback;
  const Json& v = body[key];
  if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max)
    throw HttpError(400, str("\"", key, "\" must be an integer from ", min, " to ", max, ", got ", io::json_excerpt(v)));
  return v.get<int64_t>();
}

double number_field(const Json& body, const char* key, double fallback, double min, double max) {
  if (!body.contains(key)) return fallback;
  const Json& v = body[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < min || v.get<double>() > max)
    throw HttpError(400, str("\"", key, "\" must be a number from ", min, " to ", max, ", got ", io::json_excerpt(v)));
  return v.get<double>();
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

net::Response json_response(int status, const Json& body) {
  net::Response r;
  r.status = status;
  r.body = dump(body);
  return r;
}

net::Response error_response(int status, const std::string& message) {
  net::Response r = json_response(status, {{"error", {{"status", status}, {"message", message}}}});
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

// The model a body names ("model"), if it names one.
std::optional<std::string> model_field(const Json& body) {
  if (!body.contains("model")) return std::nullopt;
  if (!body["model"].is_string()) throw HttpError(400, "\"model\" must be a string");
  return body["model"].get<std::string>();
}

// Every route's errors answered alike.
net::Handler guarded(net::Handler handler) {
  return [handler = std::move(handler)](const net::Request& req) {
    try {
      return handler(req);
    } catch (const HttpError& e) {
      return error_response(e.status, e.what());
    } catch (const QueueFullError& e) {
      return error_response(503, e.what());
    } catch (const Error& e) {
      return error_response(400, e.what());
    } catch (const std::exception& e) {
      return error_response(500, str("internal error: ", e.what()));
    }
  };
}

net::Response healthz(const net::Request&) { return json_response(200, {{"status", "ok"}}); }

net::Response playground(const net::Request&) { return net::html_page(playground_page()); }

// The routes the metrics name; anything else counts as "other", so that a scan of random paths
// cannot grow the label set without bound.
std::string route_label(const std::string& path) {
  static const std::set<std::string> known = {"/",           "/healthz", "/v1/models", "/v1/predict", "/v1/completions",
                                              "/v1/examples", "/metrics"};
  return known.contains(path) ? path : "other";
}

}  // namespace

struct Server::Model {
  std::string name;
  infer::LoadedModel loaded;
  int64_t parameters = 0;
  std::unique_ptr<DynamicBatcher> batcher;     // classifiers
  std::unique_ptr<ContinuousBatcher> generations;  // the GPT
  std::vector<double> reference;               // the test set's class distribution; empty: unknown
  std::vector<std::vector<int>> examples;      // test images for the playground, with their labels
  std::vector<int64_t> example_labels;
  std::string no_examples;                     // why there are none
  std::mutex recent_mutex;
  std::deque<int64_t> recent;                  // the last predicted classes
  std::vector<int64_t> recent_counts;

  bool is_gpt() const { return loaded.kind == nn::ModelKind::gpt; }

  // Two test images of each class from `dir` ("": the model's data set's own, infer::image_data_dir).
  void find_examples(const std::string& dir) {
    if (loaded.dataset == infer::kImageFolderDataset) {
      no_examples = "it was trained on an image folder, which the server does not read";
      return;
    }
    try {
      const data::ImageDataset test =
          data::load_mnist_idx(infer::image_data_dir(loaded.dataset, dir), false, loaded.normalization);
      const std::vector<int64_t> labels = test.labels().to_vector<int64_t>();
      std::vector<int> taken(loaded.labels.size(), 0);
      for (size_t i = 0; i < labels.size() && examples.size() < 2 * taken.size(); ++i) {
        const auto c = static_cast<size_t>(labels[i]);
        if (c >= taken.size() || taken[c] == 2) continue;
        ++taken[c];
        const std::vector<uint8_t> bytes = test.images().select(0, static_cast<int64_t>(i)).contiguous().to_vector<uint8_t>();
        examples.emplace_back(bytes.begin(), bytes.end());
        example_labels.push_back(labels[i]);
      }
    } catch (const Error& e) {
      no_examples = e.what();
    }
  }

  void note_predictions(const std::vector<int64_t>& classes) {
    std::lock_guard<std::mutex> lock(recent_mutex);
    for (int64_t c : classes) {
      recent.push_back(c);
      ++recent_counts[static_cast<size_t>(c)];
      if (recent.size() > kRecentPredictions) {
        --recent_counts[static_cast<size_t>(recent.front())];
        recent.pop_front();
      }
    }
  }
  // Total variation distance between the recent predictions' classes and the reference; -1 when
  // there is nothing to compare.
  double drift() {
    std::lock_guard<std::mutex> lock(recent_mutex);
    if (reference.empty() || recent.empty()) return -1;
    double distance = 0;
    for (size_t c = 0; c < reference.size(); ++c)
      distance += std::abs(static_cast<double>(recent_counts[c]) / static_cast<double>(recent.size()) - reference[c]);
    return distance / 2;
  }
};

ModelSpec parse_model_spec(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return {"", text};
  return {text.substr(0, eq), text.substr(eq + 1)};
}

Server::Server(const std::vector<ModelSpec>& specs, ServeOptions options) : options_(std::move(options)) {
  WEFT_CHECK(!specs.empty(), ValueError, "--checkpoint: give at least one model to serve");
  WEFT_CHECK(options_.precision.empty() || options_.precision == "fp32" || options_.precision == "bf16", ValueError,
             "--precision: must be fp32 or bf16, got '", options_.precision, "'");
  std::set<std::string> names;
  for (const ModelSpec& spec : specs) {
    auto m = std::make_unique<Model>();
    m->loaded = infer::load_model(spec.path);
    // /predict reads pixels; a table's features would need another route.
    WEFT_CHECK(!m->loaded.table, ValueError, spec.path, " holds a classifier of CSV rows; weft serve serves image "
               "classifiers and GPTs (load it in Python, or evaluate it with weft eval --data)");
    m->name = spec.name.empty() ? nn::model_kind_name(m->loaded.kind) : spec.name;
    WEFT_CHECK(names.insert(m->name).second, ValueError, "--checkpoint: two models named '", m->name,
               "'; name them: --checkpoint NAME=PATH");
    if (!options_.precision.empty()) {
      const DType wanted = options_.precision == "bf16" ? DType::bf16 : DType::f32;
      WEFT_CHECK(wanted == m->loaded.dtype || (m->loaded.scheme == "none" && !m->is_gpt()), ValueError,
                 "--precision ", options_.precision, ": ", spec.path, " is a ",
                 m->loaded.scheme != "none" ? m->loaded.scheme + " quantized " : str(dtype_name(m->loaded.dtype), " "),
                 nn::model_kind_name(m->loaded.kind), ", which weft serves only as saved", m->is_gpt() ? " (GPTs in their own dtype)" : "");
      if (wanted != m->loaded.dtype) {
        m->loaded.model->to(wanted);
        m->loaded.dtype = wanted;
      }
    }
    m->parameters = m->loaded.model->num_parameters();
    Model* model = m.get();
    if (model->is_gpt()) {
      model->generations = std::make_unique<ContinuousBatcher>(*model->loaded.gpt, options_.batch,
                                                               [this, model](int64_t n) { metrics_.batch(model->name, n); });
      metrics_.gauges(model->name, [model] { return model->generations->queue_depth(); }, {});
    } else {
      model->reference = infer::saved_class_distribution(model->loaded.metadata,
                                                         static_cast<int64_t>(model->loaded.labels.size()),
                                                         model->loaded.file)
                             .value_or(std::vector<double>{});
      model->recent_counts.assign(model->loaded.labels.size(), 0);
      model->find_examples(options_.data_dir);
      model->batcher = std::make_unique<DynamicBatcher>(
          [model](const Tensor& inputs) { return infer::class_probabilities(model->loaded, inputs); }, options_.batch,
          [this, model](int64_t n) { metrics_.batch(model->name, n); });
      metrics_.gauges(model->name, [model] { return model->batcher->queue_depth(); }, [model] { return model->drift(); });
    }
    models_.push_back(std::move(m));
  }
  net::ServerOptions http;
  http.host = options_.host;
  http.port = options_.port;
  http.limits.max_body_bytes = options_.max_body_bytes;
  http.read_timeout_s = http.write_timeout_s = options_.timeout_s;
  http.workers = options_.connections;
  http.max_connections = options_.max_connections;
  http.allowed_hosts = options_.allowed_hosts;
  http.allowed_origins = options_.allowed_origins;
  http.error = error_response;
  http.on_answered = [this](const net::Request& req, int status, double seconds) {
    metrics_.request(route_label(req.path), status, seconds);
    monitor::count_progress();
  };
  http_ = std::make_unique<net::Server>(std::move(http));
  add_routes();
}

Server::~Server() {
  stop();
  for (auto& m : models_) {
    if (m->batcher) m->batcher->stop();
    if (m->generations) m->generations->stop();
  }
}

void Server::add_routes() {
  http_->get("/healthz", healthz, /*quick=*/true);
  http_->get("/v1/models", [this](const net::Request& req) { return list_models(req); });
  http_->post("/v1/predict", guarded([this](const net::Request& req) { return predict(req); }));
  http_->post("/v1/completions", guarded([this](const net::Request& req) { return complete(req); }));
  http_->get("/", playground, /*quick=*/true);
  http_->get("/v1/examples", guarded([this](const net::Request& req) { return examples(req); }));
  http_->get("/metrics", [this](const net::Request& req) { return render_metrics(req); });
}

Server::Model& Server::model_for(const std::optional<std::string>& name, bool gpt) {
  const char* kind = gpt ? "a GPT" : "a classifier";
  if (name) {
    for (auto& m : models_)
      if (m->name == *name) {
        if (m->is_gpt() != gpt) throw HttpError(400, str("model '", *name, "' is not ", kind));
        return *m;
      }
    throw HttpError(400, str("no model named '", *name, "'"));
  }
  Model* found = nullptr;
  std::string names;
  for (auto& m : models_)
    if (m->is_gpt() == gpt) {
      names += str(names.empty() ? "" : ", ", m->name);
      if (found) throw HttpError(400, str("several models serve this route (", names, "...); name one: \"model\""));
      found = m.get();
    }
  if (!found) throw HttpError(400, str("no model here is ", kind));
  return *found;
}

net::Response Server::list_models(const net::Request&) const {
  Json list = Json::array();
  for (const auto& m : models_) {
    const infer::LoadedModel& l = m->loaded;
    list.push_back({{"name", m->name}, {"kind", nn::model_kind_name(l.kind)}, {"dtype", dtype_name(l.dtype)}, {"quantization", l.scheme},
                    {"input_shape", l.input_shape}, {"parameters", m->parameters}, {"labels", l.labels},
                    {"metadata", l.metadata}});
  }
  return json_response(200, {{"models", list}});
}

net::Response Server::predict(const net::Request& req) {
  PixelReader pixels;
  const Json body = parse_body(req, pixels.callback());
  Model& m = model_for(model_field(body), false);
  const int64_t classes = static_cast<int64_t>(m.loaded.labels.size());
  const int64_t top_k = integer_field(body, "top_k", std::min<int64_t>(3, classes), 1, classes);
  if (!body.contains("inputs") || !body["inputs"].is_array() || body["inputs"].empty())
    throw HttpError(400, "\"inputs\" must be a non-empty array of images, each an array of pixel values");
  const Json& inputs = body["inputs"];
  const int64_t per_image = numel(m.loaded.input_shape), n = static_cast<int64_t>(inputs.size());
  for (int64_t i = 0; i < n; ++i) {
    const Json& image = inputs[static_cast<size_t>(i)];
    const int64_t count = image.is_array() ? pixels.counts[static_cast<size_t>(i)] : -1;
    if (count != per_image)
      throw HttpError(400, str("inputs[", i, "] must be an array of ", per_image, " pixel values (",
                               shape_str(m.loaded.input_shape), " flattened), got ",
                               image.is_array() ? str(count, " values") : std::string(image.type_name())));
    if (pixels.first_bad_image == i)
      throw HttpError(400, str("inputs[", i, "] holds ", pixels.first_bad, ": pixels are integers from 0 to 255"));
  }
  const std::vector<uint8_t>& values = pixels.values;
  Shape shape = m.loaded.input_shape;
  shape.insert(shape.begin(), n);
  const Tensor probabilities =
      m.batcher->submit(infer::classifier_input(m.loaded, Tensor::from_vector(values, shape))).get();
  Json predictions = Json::array();
  std::vector<int64_t> best;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> p = probabilities.select(0, i).to_vector<float>();
    std::vector<int64_t> order(p.size());
    for (size_t c = 0; c < order.size(); ++c) order[c] = static_cast<int64_t>(c);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
    Json top = Json::array();
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t c = order[static_cast<size_t>(k)];
      top.push_back({{"label", c}, {"name", m.loaded.labels[static_cast<size_t>(c)]}, {"score", p[static_cast<size_t>(c)]}});
    }
    best.push_back(order[0]);
    predictions.push_back({{"probabilities", p}, {"top_k", top}});
  }
  m.note_predictions(best);
  return json_response(200, {{"model", m.name}, {"predictions", predictions}});
}

net::Response Server::complete(const net::Request& req) {
  const Json body = parse_body(req);
  Model& m = model_for(model_field(body), true);
  if (!body.contains("prompt") || !body["prompt"].is_string() || body["prompt"].get_ref<const std::string&>().empty())
    throw HttpError(400, "\"prompt\" must be a non-empty string");
  const std::string& text = body["prompt"].get_ref<const std::string&>();
  const int64_t context = m.loaded.gpt->config.context;
  const int64_t max_prompt_bytes = kPromptBytesPerToken * context;
  if (static_cast<int64_t>(text.size()) > max_prompt_bytes)
    throw HttpError(400, str("the prompt is ", text.size(), " bytes; the model's context is ", context,
                             " tokens, which no prompt over ", max_prompt_bytes, " bytes fits"));
  const data::Tokenizer& tokenizer = *m.loaded.tokenizer;
  const std::vector<int32_t> encoded = tokenizer.encode(text);
  const std::vector<int64_t> prompt(encoded.begin(), encoded.end());
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  if (prompt_tokens >= context)
    throw HttpError(400, str("the prompt is ", prompt_tokens, " tokens; the model's context is ", context,
                             ", so it must be shorter to leave room for an answer"));
  nn::GenerateOptions options;
  if (body.contains("max_tokens"))
    options.max_tokens = integer_field(body, "max_tokens", 0, 0, context - prompt_tokens);
  options.temperature = number_field(body, "temperature", options.temperature, 0, 100);
  options.top_k = integer_field(body, "top_k", options.top_k, 0, m.loaded.gpt->config.vocab);
  options.seed = static_cast<uint64_t>(integer_field(body, "seed", static_cast<int64_t>(options.seed), 0,
                                                     std::numeric_limits<int64_t>::max()));
  options.vocab_limit = tokenizer.vocab_size();
  if (body.contains("stream") && !body["stream"].is_boolean()) throw HttpError(400, "\"stream\" must be true or false");
  const bool stream = body.value("stream", false);
  auto tokens = std::make_shared<TokenStream>();
  tokens->streamed = stream;
  m.generations->submit(Generation{
      .prompt = prompt,
      .options = options,
      .on_token =
          [tokens](int64_t id) {
            {
              std::lock_guard<std::mutex> lock(tokens->mutex);
              tokens->tokens.push_back(id);
            }
            // Waking a worker that waits for the end at every token would cost a context switch
            // per token per request.
            if (tokens->streamed) tokens->changed.notify_all();
            return !tokens->cancelled.load();
          },
      .on_done =
          [tokens](const std::string& error) {
            {
              std::lock_guard<std::mutex> lock(tokens->mutex);
              tokens->error = error;
              tokens->done = true;
            }
            tokens->changed.notify_all();
          }});
  const std::string name = m.name;
  auto decode = [&tokenizer](const std::vector<int64_t>& ids) {
    return tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.end()));
  };
  if (!stream) {
    std::unique_lock<std::mutex> lock(tokens->mutex);
    tokens->changed.wait(lock, [&] { return tokens->done; });
    if (!tokens->error.empty()) throw HttpError(500, tokens->error);
    const std::vector<int64_t> generated(tokens->tokens.begin(), tokens->tokens.end());
    metrics_.tokens(name, static_cast<int64_t>(generated.size()));
    return json_response(200, {{"model", name}, {"text", decode(generated)}, {"prompt_tokens", prompt_tokens},
                        {"completion_tokens", generated.size()}});
  }
  // Server-sent events: one per token as it is drawn, then the whole text and the counts.
  net::Response res;
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-cache");
  res.stream = [this, tokens, name, prompt_tokens, decode](net::Response::Writer& out) {
    std::vector<int64_t> generated;
    for (bool done = false; !done;) {
      std::unique_lock<std::mutex> lock(tokens->mutex);
      tokens->changed.wait(lock, [&] { return tokens->done || !tokens->tokens.empty(); });
      std::string events;
      while (!tokens->tokens.empty()) {
        const int64_t id = tokens->tokens.front();
        tokens->tokens.pop_front();
        generated.push_back(id);
        events += "data: " + dump({{"token", id}, {"text", decode({id})}}) + "\n\n";
      }
      done = tokens->done;
      const std::string error = tokens->error;
      lock.unlock();
      if (done) {
        metrics_.tokens(name, static_cast<int64_t>(generated.size()));
        events += "data: " +
                  dump(error.empty() ? Json{{"done", true}, {"text", decode(generated)}, {"prompt_tokens", prompt_tokens},
                                            {"completion_tokens", generated.size()}}
                                     : Json{{"error", {{"status", 500}, {"message", error}}}}) +
                  "\n\n";
      }
      if (!out.write(events)) {
        // The client went away: the generation stops at its next token, and its end is waited
        // for so that the model is never left writing to a stream no one holds.
        tokens->cancelled = true;
        std::unique_lock<std::mutex> wait(tokens->mutex);
        tokens->changed.wait(wait, [&] { return tokens->done; });
        return;
      }
    }
  };
  return res;
}

net::Response Server::examples(const net::Request& req) {
  Model& m = model_for(req.param("model"), false);
  if (m.examples.empty()) throw HttpError(404, str("no test images for model '", m.name, "': ", m.no_examples));
  return json_response(200, {{"model", m.name}, {"images", m.examples}, {"labels", m.example_labels}});
}

net::Response Server::render_metrics(const net::Request&) const {
  net::Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.render();
  return r;
}

void Server::bind() { http_->bind(); }
int Server::port() const { return http_->port(); }

std::string Server::ready_line() const {
  std::string line = str("serving on http://", options_.host, ":", port());
  for (const auto& m : models_)
    line += str("; ", m->name, " (", nn::model_kind_name(m->loaded.kind), ", ",
                m->loaded.scheme == "none" ? dtype_name(m->loaded.dtype) : m->loaded.scheme, ", ", m->parameters,
                " parameters)");
  return line;
}

std::string Server::model_names() const {
  std::string names;
  for (const auto& m : models_) names += (names.empty() ? "" : ",") + m->name;
  return names;
}

void Server::serve() { http_->serve(); }

void Server::stop() {
  if (http_) http_->stop();
}

net::Response Server::answer(const net::Request& request) const { return http_->answer(request); }

}  // namespace weft::serve
