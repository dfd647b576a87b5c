// ProgressBar: one epoch's progress for a person watching. On a terminal it redraws one line in
// place (at most ten times a second, so drawing never shows up in a profile); otherwise (a log
// file, CI) it prints a plain line every `plain_every` steps and at the end, so logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace weft::monitor {

class ProgressBar {
 public:
  // `total` steps of `items_per_step` items each (samples per batch), for the rate and the ETA;
  // `items` names them in the rate ("samples/s", "tokens/s").
  ProgressBar(std::ostream& out, std::string label, int64_t total, int64_t items_per_step, bool interactive,
              int64_t plain_every = 100, std::string items = "samples");
  // `done` steps finished; `metrics` is shown after the counters ("loss 0.4123 acc 85.2%").
  void update(int64_t done, const std::string& metrics);
  // The last update's state on its own line: where the epoch stopped, which is its end unless
  // the run was stopped early (a time limit, a signal).
  void finish(const std::string& metrics);
  void erase();  // on a terminal, clears the bar's line (a bar shown only while something runs)

 private:
  void draw(int64_t done, const std::string& metrics, bool final_line);

  std::ostream& out_;
  std::string label_, items_;
  int64_t total_, items_per_step_, plain_every_;
  bool interactive_;
  int64_t first_done_ = -1;  // steps already done when the bar started (a resumed epoch)
  int64_t last_done_ = -1;   // the last update's count
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// Whether stdout is a terminal (progress bar) or a pipe / file (plain lines).
bool stdout_is_terminal();

}  // namespace weft::monitor
