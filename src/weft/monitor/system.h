// What the operating system says about this process and this machine: the figures `weft smi`
// shows, read from /proc and /sys (Linux).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace weft::monitor {

// The process's peak resident set size (getrusage's ru_maxrss), in bytes.
int64_t peak_rss_bytes();

// The process's resident set size now (/proc/self/statm), in bytes.
int64_t current_rss_bytes();

struct MachineStats {
  std::string cpu_model;                 // /proc/cpuinfo "model name"
  int logical_cores = 0;                 // CPUs the kernel counts in /proc/stat
  double mean_mhz = 0;                   // mean over cores of the current clock, 0 when not reported
  std::vector<double> core_utilisation;  // per core, busy fraction 0..1 over the sampling interval
  int64_t ram_total_bytes = 0;           // /proc/meminfo MemTotal
  int64_t ram_used_bytes = 0;            // MemTotal - MemAvailable
};

// Samples /proc/stat twice, `interval` apart, for the utilisation; the rest is read once.
MachineStats sample_machine(std::chrono::milliseconds interval);

}  // namespace weft::monitor
