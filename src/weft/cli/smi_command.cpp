// `weft smi`: an nvidia-smi-like view of this machine (CPU, per-core utilisation, RAM, NVIDIA
// GPUs through NVML) and of every running weft process, from the statuses they publish
// (monitor/status_file.h). `--watch SECONDS` redraws like `watch nvidia-smi`; `--json` prints one
// object per view.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/allocator.h"
#include "weft/monitor/nvml.h"
#include "weft/monitor/status_file.h"
#include "weft/monitor/system.h"

namespace weft::cli {

namespace {

struct SmiFlags {
  std::optional<double> watch_seconds;
  bool json = false;
};

// Long enough for /proc/stat's jiffies (10 ms each) to give a per-core percentage.
constexpr std::chrono::milliseconds kUtilisationInterval{200};

struct View {
  monitor::MachineStats machine;
  monitor::GpuReport gpus;
  std::vector<monitor::ProcessStatus> processes;
  std::vector<std::string> skipped;  // status files not listed, and why
  double taken_unix_s = 0;
};

View take_view() {
  View v;
  v.machine = monitor::sample_machine(kUtilisationInterval);
  v.gpus = monitor::query_gpus();
  v.processes = monitor::read_statuses(monitor::status_directory(), &v.skipped);
  v.taken_unix_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return v;
}

nlohmann::json to_json(const View& v) {
  // NVML's unknown readings (-1) are null.
  const auto known = [](auto value) { return value < 0 ? nlohmann::json(nullptr) : nlohmann::json(value); };
  nlohmann::json gpus = nlohmann::json::array();
  for (const monitor::GpuStats& g : v.gpus.gpus) {
    nlohmann::json processes = nlohmann::json::array();
    for (const monitor::GpuProcess& p : g.processes)
      processes.push_back({{"pid", p.pid}, {"memory_bytes", known(p.memory_bytes)}});
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"memory_used_bytes", g.memory_used_bytes},
                    {"memory_total_bytes", g.memory_total_bytes},
                    {"utilisation_percent", known(g.utilisation_percent)},
                    {"memory_utilisation_percent", known(g.memory_utilisation_percent)},
                    {"temperature_c", known(g.temperature_c)},
                    {"power_watts", known(g.power_watts)},
                    {"power_cap_watts", known(g.power_cap_watts)},
                    {"sm_clock_mhz", known(g.sm_clock_mhz)},
                    {"sm_clock_max_mhz", known(g.sm_clock_max_mhz)},
                    {"memory_clock_mhz", known(g.memory_clock_mhz)},
                    {"memory_clock_max_mhz", known(g.memory_clock_max_mhz)},
                    {"processes", processes}});
  }
  nlohmann::json processes = nlohmann::json::array();
  for (const monitor::ProcessStatus& p : v.processes) processes.push_back(p.to_json());
  return {{"cpu",
           {{"model", v.machine.cpu_model},
            {"cores", v.machine.logical_cores},
            {"mhz", v.machine.mean_mhz},
            {"utilisation", v.machine.core_utilisation}}},
          {"ram", {{"used_bytes", v.machine.ram_used_bytes}, {"total_bytes", v.machine.ram_total_bytes}}},
          {"gpu", {{"available", v.gpus.available}, {"note", v.gpus.note}, {"devices", gpus}}},
          {"processes", processes},
          {"skipped", v.skipped},
          {"time_unix_s", v.taken_unix_s}};
}

std::string printed(const char* format, auto... values) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, format, values...);
  return buffer;
}

// A status file's text, written by whoever could write it, shown so that it cannot drive the
// terminal: C0 controls, DEL, C1 controls (U+0080 to U+009F), the bidirectional controls that
// reorder what a terminal shows (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069) and
// bytes that are not UTF-8 become \xNN; other UTF-8 passes.
std::string printable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    size_t length = byte < 0x80 ? 1 : byte >= 0xc2 && byte < 0xe0 ? 2 : byte >= 0xe0 && byte < 0xf0 ? 3 : byte >= 0xf0 && byte < 0xf5 ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    // Overlong and surrogate forms are left to the terminal to reject; C1 controls are U+0080..U+009F.
    const auto next = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
    const bool bidi = valid && ((length == 2 && byte == 0xd8 && next(1) == 0x9c) ||
                                (length == 3 && byte == 0xe2 && next(1) == 0x80 &&
                                 (next(2) == 0x8e || next(2) == 0x8f || (next(2) >= 0xaa && next(2) <= 0xae))) ||
                                (length == 3 && byte == 0xe2 && next(1) == 0x81 && next(2) >= 0xa6 && next(2) <= 0xa9));
    const bool control = byte < 0x20 || byte == 0x7f || (byte == 0xc2 && valid && next(1) < 0xa0) || bidi;
    if (!valid || control) {
      for (size_t k = 0; k < (valid ? length : 1); ++k) out += printed("\\x%02x", static_cast<unsigned char>(text[i + k]));
      i += valid ? length : 1;
      continue;
    }
    out.append(text, i, length);
    i += length;
  }
  return out;
}

std::string elapsed(double seconds) {
  // A status published a moment after the view was taken is 0 seconds old, not negative.
  const auto s = static_cast<int64_t>(std::max(seconds, 0.0));
  return printed("%lld:%02lld:%02lld", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60),
                 static_cast<long long>(s % 60));
}

// A reading NVML gave, or "n/a".
std::string reading(const char* format, auto value) { return value < 0 ? "n/a" : printed(format, value); }

// Two lines a GPU, as nvidia-smi's table, then a line for each process computing on it (named
// when it is a weft process that publishes a status).
void print_gpu(const monitor::GpuStats& g, const std::vector<monitor::ProcessStatus>& weft_processes,
               std::ostream& out) {
  out << "GPU " << g.index << " " << printable(g.name) << "\n";
  out << "      memory " << format_bytes(g.memory_used_bytes) << " / " << format_bytes(g.memory_total_bytes) << "  util "
      << reading("%d%%", g.utilisation_percent) << " (memory " << reading("%d%%", g.memory_utilisation_percent)
      << ")  " << reading("%d C", g.temperature_c) << "  power " << reading("%.0f", g.power_watts) << " / "
      << reading("%.0f W", g.power_cap_watts) << "  clocks SM " << reading("%d", g.sm_clock_mhz) << " / "
      << reading("%d MHz", g.sm_clock_max_mhz) << ", memory " << reading("%d", g.memory_clock_mhz) << " / "
      << reading("%d MHz", g.memory_clock_max_mhz) << "\n";
  for (const monitor::GpuProcess& p : g.processes) {
    const auto weft = std::find_if(weft_processes.begin(), weft_processes.end(),
                                   [&](const monitor::ProcessStatus& w) { return w.pid == p.pid; });
    out << "      pid " << p.pid << (weft == weft_processes.end() ? "" : " (weft " + printable(weft->command) + ")")
        << "  " << (p.memory_bytes < 0 ? "n/a" : format_bytes(p.memory_bytes)) << "\n";
  }
}

void print_table(const View& v, std::ostream& out) {
  const std::time_t now = static_cast<std::time_t>(v.taken_unix_s);
  char when[64];
  std::strftime(when, sizeof when, "%a %b %e %H:%M:%S %Y", std::localtime(&now));
  out << "weft smi   " << when << "\n";
  out << "CPU   " << v.machine.cpu_model << ", " << v.machine.logical_cores << " cores at "
      << printed("%.0f", v.machine.mean_mhz) << " MHz\n";
  out << "util ";
  for (size_t i = 0; i < v.machine.core_utilisation.size(); ++i) {
    if (i > 0 && i % 8 == 0) out << "\n     ";
    out << printed(" cpu%-3zu %3.0f%%", i, 100 * v.machine.core_utilisation[i]);
  }
  out << "\n";
  const double ram_fraction =
      v.machine.ram_total_bytes > 0 ? static_cast<double>(v.machine.ram_used_bytes) / v.machine.ram_total_bytes : 0;
  out << "RAM   " << format_bytes(v.machine.ram_used_bytes) << " used / " << format_bytes(v.machine.ram_total_bytes) << " total"
      << printed(" (%.0f%%)", 100 * ram_fraction) << "\n";
  if (v.gpus.gpus.empty()) out << "GPU   " << v.gpus.note << "\n";
  for (const monitor::GpuStats& g : v.gpus.gpus) print_gpu(g, v.processes, out);
  out << "\n";
  for (const std::string& note : v.skipped) out << "note: " << printable(note) << "\n";
  if (v.processes.empty()) {
    out << "no running weft processes (statuses in " << printable(monitor::status_directory()) << ")\n";
    return;
  }
  out << printed("%-8s %-8s %-12s %-16s %10s %10s %10s %10s %5s %9s\n", "PID", "COMMAND", "MODEL", "PROGRESS", "RSS",
                 "ALLOCATED", "RESERVED", "PEAK", "OOMS", "UPTIME");
  for (const monitor::ProcessStatus& p : v.processes) {
    const std::string progress = printable(p.progress_name) + " " + std::to_string(p.progress);
    out << printed("%-8lld %-8s %-12s %-16s %10s %10s %10s %10s %5lld %9s\n", static_cast<long long>(p.pid),
                   printable(p.command).c_str(), printable(p.model).c_str(), progress.c_str(), format_bytes(p.rss_bytes).c_str(),
                   format_bytes(p.allocated_bytes).c_str(), format_bytes(p.reserved_bytes).c_str(),
                   format_bytes(p.peak_allocated_bytes).c_str(), static_cast<long long>(p.num_ooms),
                   elapsed(v.taken_unix_s - p.started_unix_s).c_str());
  }
}

void show(const View& v, bool json) {
  if (json) {
    std::cout << to_json(v).dump() << std::endl;
  } else {
    print_table(v, std::cout);
    std::cout.flush();
  }
}

void smi(const SmiFlags& f) {
  if (!f.watch_seconds) {
    show(take_view(), f.json);
    return;
  }
  // Until interrupted: SIGINT's default action ends the process (train/stop_signals.h).
  const auto period = std::chrono::duration<double>(*f.watch_seconds);
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    const View v = take_view();
    // Clear the screen and home the cursor, as `watch` does; JSON goes one object per line.
    if (!f.json) std::cout << "\x1b[2J\x1b[H";
    show(v, f.json);
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(period));
  }
}

}  // namespace

void add_smi_command(CLI::App& app, std::function<void()>& run) {
  auto f = std::make_shared<SmiFlags>();
  CLI::App* s = app.add_subcommand("smi", "an nvidia-smi-like view of the CPU, RAM, GPUs and running weft processes");
  number_flag(s, "--watch", f->watch_seconds, "redraw every SECONDS until interrupted (at most a day)",
              {.min = 0, .max = 86400, .min_open = true})
      ->type_name("SECONDS");
  s->add_flag("--json", f->json, "print one JSON object (one per line under --watch)");
  s->callback([&run, f] { run = [f] { smi(*f); }; });
}

}  // namespace weft::cli
