#include "weft/monitor/nvml.h"

#include <dlfcn.h>

namespace weft::monitor {

namespace {

// The few NVML entry points used, with the ABI of nvml.h (NVML_SUCCESS is 0; handles are
// opaque pointers; nvmlMemory_t and nvmlUtilization_t as declared there).
using nvmlReturn = int;
using nvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlUtilization {
  unsigned int gpu, memory;
};

template <typename F>
F symbol(void* library, const char* name) {
  return reinterpret_cast<F>(dlsym(library, name));
}

}  // namespace

GpuReport query_gpus() {
  GpuReport report;
  // Loaded once and kept: NVML is not meant to be unloaded while the process runs.
  static void* const library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    report.note = "no GPU found (NVML not available)";
    return report;
  }
  const auto init = symbol<nvmlReturn (*)()>(library, "nvmlInit_v2");
  const auto count = symbol<nvmlReturn (*)(unsigned int*)>(library, "nvmlDeviceGetCount_v2");
  const auto handle = symbol<nvmlReturn (*)(unsigned int, nvmlDevice*)>(library, "nvmlDeviceGetHandleByIndex_v2");
  const auto name = symbol<nvmlReturn (*)(nvmlDevice, char*, unsigned int)>(library, "nvmlDeviceGetName");
  const auto memory = symbol<nvmlReturn (*)(nvmlDevice, NvmlMemory*)>(library, "nvmlDeviceGetMemoryInfo");
  const auto utilisation = symbol<nvmlReturn (*)(nvmlDevice, NvmlUtilization*)>(library, "nvmlDeviceGetUtilizationRates");
  const auto shutdown = symbol<nvmlReturn (*)()>(library, "nvmlShutdown");
  if (!init || !count || !handle || !name || !memory || !utilisation || !shutdown) {
    report.note = "no GPU found (NVML lacks the functions weft uses)";
    return report;
  }
  if (init() != 0) {
    report.note = "no GPU found (NVML did not initialise: no NVIDIA driver loaded?)";
    return report;
  }
  report.available = true;
  unsigned int devices = 0;
  if (count(&devices) != 0) devices = 0;
  for (unsigned int i = 0; i < devices; ++i) {
    nvmlDevice device = nullptr;
    if (handle(i, &device) != 0) continue;
    GpuStats g;
    g.index = static_cast<int>(i);
    char buffer[96] = {};
    if (name(device, buffer, sizeof buffer) == 0) g.name = buffer;
    NvmlMemory m{};
    if (memory(device, &m) == 0) {
      g.memory_used_bytes = static_cast<int64_t>(m.used);
      g.memory_total_bytes = static_cast<int64_t>(m.total);
    }
    NvmlUtilization u{};
    if (utilisation(device, &u) == 0) g.utilisation_percent = static_cast<int>(u.gpu);
    report.gpus.push_back(g);
  }
  if (report.gpus.empty()) report.note = "no GPU found (NVML lists no device)";
  shutdown();
  return report;
}

}  // namespace weft::monitor
