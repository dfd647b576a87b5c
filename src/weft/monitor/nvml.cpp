#include "weft/monitor/nvml.h"

#include <dlfcn.h>

namespace weft::monitor {

namespace {

// The NVML entry points used, with the ABI of nvml.h: NVML_SUCCESS is 0 and
// NVML_ERROR_INSUFFICIENT_SIZE 7; handles are opaque pointers; the structs as declared there.
using nvmlReturn = int;
using nvmlDevice = void*;
constexpr nvmlReturn kSuccess = 0, kInsufficientSize = 7;
constexpr int kTemperatureGpu = 0;      // NVML_TEMPERATURE_GPU
constexpr int kClockSm = 1, kClockMemory = 2;  // NVML_CLOCK_SM, NVML_CLOCK_MEM
constexpr unsigned long long kValueNotAvailable = ~0ull;  // NVML_VALUE_NOT_AVAILABLE
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlProcessInfo {  // nvmlProcessInfo_t, as nvmlDeviceGetComputeRunningProcesses_v3 fills it
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};

template <typename F>
F symbol(void* library, const char* name) {
  return reinterpret_cast<F>(dlsym(library, name));
}

// `get(device, &value)` through an entry point that may be missing; -1 when it is or fails.
template <typename Entry, typename... Args>
int64_t read_or_unknown(Entry entry, nvmlDevice device, Args... args) {
  unsigned int value = 0;
  if (entry == nullptr || entry(device, args..., &value) != kSuccess) return -1;
  return value;
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
  const auto shutdown = symbol<nvmlReturn (*)()>(library, "nvmlShutdown");
  if (!init || !count || !handle || !name || !memory || !shutdown) {
    report.note = "no GPU found (NVML lacks the functions weft uses)";
    return report;
  }
  // Older drivers lack some of these; each reading is then unknown, not the whole report.
  const auto utilisation = symbol<nvmlReturn (*)(nvmlDevice, NvmlUtilization*)>(library, "nvmlDeviceGetUtilizationRates");
  const auto temperature = symbol<nvmlReturn (*)(nvmlDevice, int, unsigned int*)>(library, "nvmlDeviceGetTemperature");
  const auto power = symbol<nvmlReturn (*)(nvmlDevice, unsigned int*)>(library, "nvmlDeviceGetPowerUsage");
  const auto power_cap = symbol<nvmlReturn (*)(nvmlDevice, unsigned int*)>(library, "nvmlDeviceGetEnforcedPowerLimit");
  const auto clock = symbol<nvmlReturn (*)(nvmlDevice, int, unsigned int*)>(library, "nvmlDeviceGetClockInfo");
  const auto max_clock = symbol<nvmlReturn (*)(nvmlDevice, int, unsigned int*)>(library, "nvmlDeviceGetMaxClockInfo");
  const auto processes = symbol<nvmlReturn (*)(nvmlDevice, unsigned int*, NvmlProcessInfo*)>(
      library, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (init() != kSuccess) {
    report.note = "no GPU found (NVML did not initialise: no NVIDIA driver loaded?)";
    return report;
  }
  report.available = true;
  unsigned int devices = 0;
  if (count(&devices) != kSuccess) devices = 0;
  for (unsigned int i = 0; i < devices; ++i) {
    nvmlDevice device = nullptr;
    if (handle(i, &device) != kSuccess) continue;
    GpuStats g;
    g.index = static_cast<int>(i);
    char buffer[96] = {};
    if (name(device, buffer, sizeof buffer - 1) == kSuccess) g.name = buffer;
    NvmlMemory m{};
    if (memory(device, &m) == kSuccess) {
      g.memory_used_bytes = static_cast<int64_t>(m.used);
      g.memory_total_bytes = static_cast<int64_t>(m.total);
    }
    NvmlUtilization u{};
    if (utilisation && utilisation(device, &u) == kSuccess) {
      g.utilisation_percent = static_cast<int>(u.gpu);
      g.memory_utilisation_percent = static_cast<int>(u.memory);
    }
    g.temperature_c = static_cast<int>(read_or_unknown(temperature, device, kTemperatureGpu));
    const int64_t milliwatts = read_or_unknown(power, device), cap_milliwatts = read_or_unknown(power_cap, device);
    if (milliwatts >= 0) g.power_watts = milliwatts / 1000.0;
    if (cap_milliwatts >= 0) g.power_cap_watts = cap_milliwatts / 1000.0;
    g.sm_clock_mhz = static_cast<int>(read_or_unknown(clock, device, kClockSm));
    g.sm_clock_max_mhz = static_cast<int>(read_or_unknown(max_clock, device, kClockSm));
    g.memory_clock_mhz = static_cast<int>(read_or_unknown(clock, device, kClockMemory));
    g.memory_clock_max_mhz = static_cast<int>(read_or_unknown(max_clock, device, kClockMemory));
    if (processes) {
      // Asked with room for some; a busier device says how many, and is asked once more.
      std::vector<NvmlProcessInfo> infos(64);
      unsigned int listed = static_cast<unsigned int>(infos.size());
      nvmlReturn r = processes(device, &listed, infos.data());
      if (r == kInsufficientSize) {
        infos.resize(listed + 16);
        listed = static_cast<unsigned int>(infos.size());
        r = processes(device, &listed, infos.data());
      }
      if (r == kSuccess)
        for (unsigned int k = 0; k < listed && k < infos.size(); ++k)
          g.processes.push_back({.pid = infos[k].pid,
                                 .memory_bytes = infos[k].used_gpu_memory == kValueNotAvailable
                                                     ? -1
                                                     : static_cast<int64_t>(infos[k].used_gpu_memory)});
    }
    report.gpus.push_back(g);
  }
  if (report.gpus.empty()) report.note = "no GPU found (NVML lists no device)";
  shutdown();
  return report;
}

}  // namespace weft::monitor
