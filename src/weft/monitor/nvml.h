// NVIDIA GPUs as NVML (the library behind nvidia-smi) reports them, loaded at run time with
// dlopen so that weft neither links against nor needs the driver: without libnvidia-ml.so.1, or
// when it cannot initialise (no driver loaded, no device), the report says why and lists none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft::monitor {

struct GpuStats {
  int index = 0;
  std::string name;
  int64_t memory_used_bytes = 0, memory_total_bytes = 0;
  int utilisation_percent = 0;  // of the last sample period, as nvidia-smi's GPU-Util
};

struct GpuReport {
  bool available = false;  // NVML loaded and initialised
  std::string note;        // why no GPU is listed, when none is
  std::vector<GpuStats> gpus;
};

GpuReport query_gpus();

}  // namespace weft::monitor
