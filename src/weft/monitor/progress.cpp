#include "weft/monitor/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace weft::monitor {

namespace {

std::string format_duration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", long(s / 3600), long(s / 60 % 60), long(s % 60));
  else std::snprintf(buf, sizeof buf, "%02ld:%02ld", long(s / 60), long(s % 60));
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(std::ostream& out, std::string label, int64_t total, int64_t items_per_step,
                         bool interactive, int64_t plain_every, std::string items)
    : out_(out), label_(std::move(label)), items_(std::move(items)), total_(total), items_per_step_(items_per_step),
      plain_every_(std::max<int64_t>(plain_every, 1)), interactive_(interactive),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t done, const std::string& metrics) {
  auto now = std::chrono::steady_clock::now();
  if (first_done_ < 0) first_done_ = done - 1;
  last_done_ = done;
  if (interactive_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  } else if (done % plain_every_ != 0 || done == total_) {
    return;  // the last step's line is finish()'s
  }
  last_draw_ = now;
  draw(done, metrics, !interactive_);
}

void ProgressBar::finish(const std::string& metrics) { draw(last_done_ < 0 ? total_ : last_done_, metrics, true); }

void ProgressBar::draw(int64_t done, const std::string& metrics, bool final_line) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  int64_t steps = done - std::max<int64_t>(first_done_, 0);
  double steps_per_s = elapsed > 0 ? steps / elapsed : 0;
  double eta = steps_per_s > 0 ? (total_ - done) / steps_per_s : 0;
  std::string line = label_ + " ";
  if (interactive_) {
    constexpr int kWidth = 24;
    int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    line.append("[").append(filled, '#').append(kWidth - filled, '.').append("] ");
  }
  char counters[128];
  std::snprintf(counters, sizeof counters, "%ld/%ld", long(done), long(total_));
  line.append(counters).append(metrics.empty() ? "" : " " + metrics);
  char rate[96];
  std::snprintf(rate, sizeof rate, " | %.0f %s/s | %s elapsed, ETA %s", steps_per_s * items_per_step_, items_.c_str(),
                format_duration(elapsed).c_str(), format_duration(eta).c_str());
  line += rate;
  if (interactive_) out_ << "\r\033[K" << line << (final_line ? "\n" : "") << std::flush;
  else out_ << line << '\n' << std::flush;
}

void ProgressBar::erase() {
  if (interactive_) out_ << "\r\033[K" << std::flush;
}

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

}  // namespace weft::monitor
