// What `weft serve` exposes at GET /metrics, in the Prometheus text format (version 0.0.4, which
// `promtool check metrics` accepts): requests by route and status, a request-latency histogram
// by route, a batch-size histogram and the queue's depth by model, tokens generated, and the
// drift of recent predictions from the test set's class distribution. Thread-safe: the HTTP
// workers and the models' threads record into it while a scrape renders it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace weft::serve {

// Cumulative counts of observations at or below each upper bound, as Prometheus histograms are.
struct Histogram {
  std::vector<double> bounds;    // ascending; +Inf is implicit
  std::vector<uint64_t> counts;  // per bound, not cumulative (render() accumulates)
  uint64_t count = 0;
  double sum = 0;
  explicit Histogram(std::vector<double> upper_bounds = {});
  void observe(double value);
};

class Metrics {
 public:
  void request(const std::string& route, int status, double seconds);
  void batch(const std::string& model, int64_t inputs);
  void tokens(const std::string& model, int64_t generated);
  // Read at each scrape: the requests waiting in `model`'s queue, and its drift (nothing when the
  // function returns a negative value: no predictions yet, or no distribution to compare with).
  void gauges(const std::string& model, std::function<int64_t()> queue_depth, std::function<double()> drift);

  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, Histogram> latency_, batch_;
  std::map<std::string, uint64_t> tokens_;
  std::map<std::string, std::pair<std::function<int64_t()>, std::function<double()>>> gauges_;
};

// A label value as the text format quotes it: backslash, double quote and newline escaped.
std::string label_value(const std::string& value);

}  // namespace weft::serve
