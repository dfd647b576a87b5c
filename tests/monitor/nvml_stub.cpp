// A stand-in for the NVIDIA driver's libnvidia-ml.so.1, built as that file name beside the tests:
// `weft smi` run with LD_LIBRARY_PATH pointing at it reads two fixed GPUs, so its GPU view is
// tested on machines without one. WEFT_NVML_STUB picks a case:
//   unset           two H100s with every reading; on GPU 0 compute the process WEFT_NVML_STUB_PID
//                   names (else the caller) with 1.5 GiB, and pid 1 whose memory NVML cannot read
//   "init-fails"    nvmlInit_v2 answers NVML_ERROR_DRIVER_NOT_LOADED
//   "unsupported"   only name and memory are read; every other reading is NOT_SUPPORTED
//   "busy"          100 processes on GPU 0, more than a first call has room for
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kSuccess = 0, kNotSupported = 3, kInsufficientSize = 7, kDriverNotLoaded = 9;

std::string mode() {
  const char* m = std::getenv("WEFT_NVML_STUB");
  return m ? m : "";
}

struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned int gpu, memory;
};
struct ProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};

// Devices are their index, plus one so that none is a null handle.
unsigned int index_of(void* device) { return static_cast<unsigned int>(reinterpret_cast<uintptr_t>(device) - 1); }

int unsupported_or(unsigned int* out, unsigned int value) {
  if (mode() == "unsupported") return kNotSupported;
  *out = value;
  return kSuccess;
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return mode() == "init-fails" ? kDriverNotLoaded : kSuccess; }
int nvmlShutdown() { return kSuccess; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  *device = reinterpret_cast<void*>(uintptr_t{index} + 1);
  return kSuccess;
}
int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  std::strncpy(name, "NVIDIA H100 80GB HBM3 (stub)", length);
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  memory->total = 85899345920ull;  // 80 GiB
  memory->used = index_of(device) == 0 ? 3221225472ull : 0;  // 3 GiB on GPU 0
  memory->free = memory->total - memory->used;
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  if (mode() == "unsupported") return kNotSupported;
  *u = {index_of(device) == 0 ? 87u : 0u, index_of(device) == 0 ? 41u : 0u};
  return kSuccess;
}
int nvmlDeviceGetTemperature(void* device, int sensor, unsigned int* celsius) {
  return unsupported_or(celsius, sensor == 0 ? 61 + index_of(device) : 0);
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) { return unsupported_or(milliwatts, 412300); }
int nvmlDeviceGetEnforcedPowerLimit(void* device, unsigned int* milliwatts) { return unsupported_or(milliwatts, 700000); }
int nvmlDeviceGetClockInfo(void* device, int type, unsigned int* mhz) { return unsupported_or(mhz, type == 1 ? 1755 : 2619); }
int nvmlDeviceGetMaxClockInfo(void* device, int type, unsigned int* mhz) { return unsupported_or(mhz, type == 1 ? 1980 : 2619); }
int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, ProcessInfo* infos) {
  if (mode() == "unsupported") return kNotSupported;
  const unsigned int running = index_of(device) != 0 ? 0 : mode() == "busy" ? 100 : 2;
  if (*count < running) {
    *count = running;
    return kInsufficientSize;
  }
  *count = running;
  for (unsigned int i = 0; i < running; ++i) infos[i] = {100000 + i, 1ull << 20, 0, 0};
  if (mode() != "busy") {
    const char* pid = std::getenv("WEFT_NVML_STUB_PID");
    infos[0] = {pid ? static_cast<unsigned int>(std::atoi(pid)) : static_cast<unsigned int>(getpid()), 1610612736ull, 0, 0};
    infos[1] = {1, ~0ull, 0, 0};
  }
  return kSuccess;
}

}  // extern "C"
