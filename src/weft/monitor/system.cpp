#include "weft/monitor/system.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace weft::monitor {

namespace {

// Per core ("cpuN" lines of /proc/stat): busy and total jiffies since boot.
struct CoreTicks {
  int64_t busy = 0, total = 0;
};

std::vector<CoreTicks> read_core_ticks() {
  std::vector<CoreTicks> cores;
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    // "cpu " is the sum over cores; the per-core lines are "cpu0", "cpu1", ...
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] == ' ') continue;
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    CoreTicks t;
    int64_t value = 0;
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    for (int i = 0; i < 8 && fields >> value; ++i) {
      t.total += value;
      if (i != 3 && i != 4) t.busy += value;  // idle and iowait are not busy
    }
    cores.push_back(t);
  }
  return cores;
}

}  // namespace

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

int64_t current_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(in >> size_pages >> resident_pages)) return 0;
  return resident_pages * sysconf(_SC_PAGESIZE);
}

MachineStats sample_machine(std::chrono::milliseconds interval) {
  MachineStats m;
  const std::vector<CoreTicks> before = read_core_ticks();
  std::this_thread::sleep_for(interval);
  const std::vector<CoreTicks> after = read_core_ticks();
  m.logical_cores = static_cast<int>(after.size());
  for (size_t i = 0; i < after.size() && i < before.size(); ++i) {
    const int64_t total = after[i].total - before[i].total;
    m.core_utilisation.push_back(total > 0 ? static_cast<double>(after[i].busy - before[i].busy) / total : 0.0);
  }

  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  double mhz_sum = 0;
  int mhz_count = 0;
  while (std::getline(cpuinfo, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && m.cpu_model.empty()) m.cpu_model = value;
    if (key == "cpu MHz") {
      mhz_sum += std::stod(value);
      ++mhz_count;
    }
  }
  if (mhz_count > 0) m.mean_mhz = mhz_sum / mhz_count;

  std::ifstream meminfo("/proc/meminfo");
  std::map<std::string, int64_t> kib;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t value = 0;
    if (fields >> key >> value) kib[key] = value;
  }
  m.ram_total_bytes = kib["MemTotal:"] * 1024;
  m.ram_used_bytes = (kib["MemTotal:"] - kib["MemAvailable:"]) * 1024;
  return m;
}

}  // namespace weft::monitor
