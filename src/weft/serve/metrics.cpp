#include "weft/serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "weft/core/flag_value.h"

namespace weft::serve {

namespace {

// Latency: 1 ms to 10 s (the target is tens of milliseconds); batch sizes: powers of two to 256.
const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
const std::vector<double> kBatchBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256};

std::string number(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return shortest(value);
}

void render_histogram(std::string& out, const char* name, const char* label, const std::string& key,
                      const Histogram& h) {
  const std::string labels = std::string(label) + "=\"" + label_value(key) + "\"";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += std::string(name) + "_bucket{" + labels + ",le=\"" + number(h.bounds[i]) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  out += std::string(name) + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  out += std::string(name) + "_sum{" + labels + "} " + number(h.sum) + "\n";
  out += std::string(name) + "_count{" + labels + "} " + std::to_string(h.count) + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size(), 0) {}

void Histogram::observe(double value) {
  const auto at = std::lower_bound(bounds.begin(), bounds.end(), value);
  if (at != bounds.end()) ++counts[static_cast<size_t>(at - bounds.begin())];
  ++count;
  sum += value;
}

std::string label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

void Metrics::request(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
  latency_.try_emplace(route, kLatencyBounds).first->second.observe(seconds);
}

void Metrics::batch(const std::string& model, int64_t inputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  batch_.try_emplace(model, kBatchBounds).first->second.observe(static_cast<double>(inputs));
}

void Metrics::tokens(const std::string& model, int64_t generated) {
  std::lock_guard<std::mutex> lock(mutex_);
  tokens_[model] += static_cast<uint64_t>(generated);
}

void Metrics::gauges(const std::string& model, std::function<int64_t()> queue_depth, std::function<double()> drift) {
  std::lock_guard<std::mutex> lock(mutex_);
  gauges_[model] = {std::move(queue_depth), std::move(drift)};
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out += "# HELP weft_requests_total HTTP requests answered, by route and status code.\n"
         "# TYPE weft_requests_total counter\n";
  for (const auto& [key, count] : requests_)
    out += "weft_requests_total{route=\"" + label_value(key.first) + "\",status=\"" + std::to_string(key.second) +
           "\"} " + std::to_string(count) + "\n";
  out += "# HELP weft_request_duration_seconds Time from a request's arrival to its answer, by route.\n"
         "# TYPE weft_request_duration_seconds histogram\n";
  for (const auto& [route, h] : latency_) render_histogram(out, "weft_request_duration_seconds", "route", route, h);
  out += "# HELP weft_batch_size Inputs run together in one forward pass, by model.\n"
         "# TYPE weft_batch_size histogram\n";
  for (const auto& [model, h] : batch_) render_histogram(out, "weft_batch_size", "model", model, h);
  out += "# HELP weft_queue_depth Requests waiting for their model's inference thread.\n"
         "# TYPE weft_queue_depth gauge\n";
  for (const auto& [model, g] : gauges_)
    out += "weft_queue_depth{model=\"" + label_value(model) + "\"} " + std::to_string(g.first()) + "\n";
  out += "# HELP weft_generated_tokens_total Tokens generated, by model.\n"
         "# TYPE weft_generated_tokens_total counter\n";
  for (const auto& [model, count] : tokens_)
    out += "weft_generated_tokens_total{model=\"" + label_value(model) + "\"} " + std::to_string(count) + "\n";
  out += "# HELP weft_prediction_drift Total variation distance (half the L1 distance, 0 to 1) between the class "
         "distribution of the last 1000 predictions and the test set's, stored in the checkpoint.\n"
         "# TYPE weft_prediction_drift gauge\n";
  for (const auto& [model, g] : gauges_) {
    const double drift = g.second ? g.second() : -1;
    if (drift >= 0) out += "weft_prediction_drift{model=\"" + label_value(model) + "\"} " + number(drift) + "\n";
  }
  return out;
}

}  // namespace weft::serve
