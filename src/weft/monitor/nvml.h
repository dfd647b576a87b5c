// NVIDIA GPUs as NVML (the library behind nvidia-smi) reports them, loaded at run time with
// dlopen so that weft neither links against nor needs the driver: without libnvidia-ml.so.1, or
// when it cannot initialise (no driver loaded, no device), the report says why and lists none.
// A reading the device does not support (power on some boards, clocks under virtualisation) is
// -1, shown as "n/a", and the rest are still read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft::monitor {

struct GpuProcess {
  int64_t pid = 0;
  int64_t memory_bytes = -1;  // -1 where NVML cannot tell (it cannot inside some containers)
};

struct GpuStats {
  int index = 0;
  std::string name;
  int64_t memory_used_bytes = 0, memory_total_bytes = 0;
  int utilisation_percent = -1;         // of the last sample period, as nvidia-smi's GPU-Util
  int memory_utilisation_percent = -1;  // of the time the memory was read or written
  int temperature_c = -1;
  double power_watts = -1, power_cap_watts = -1;  // the cap: the limit the board enforces now
  int sm_clock_mhz = -1, sm_clock_max_mhz = -1;
  int memory_clock_mhz = -1, memory_clock_max_mhz = -1;
  std::vector<GpuProcess> processes;  // those computing on it, with the device memory each holds
};

struct GpuReport {
  bool available = false;  // NVML loaded and initialised
  std::string note;        // why no GPU is listed, when none is
  std::vector<GpuStats> gpus;
};

GpuReport query_gpus();

}  // namespace weft::monitor
