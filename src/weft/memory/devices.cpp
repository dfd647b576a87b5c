#include "weft/memory/devices.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "weft/core/error.h"

namespace weft::memory {

namespace {

constexpr int64_t kGB = 1000 * 1000 * 1000;

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// MemTotal from /proc/meminfo ("MemTotal:  131891316 kB", where kB means KiB).
int64_t host_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    int64_t kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB" && kib > 0) return kib * 1024;
    break;
  }
  throw IOError("cannot read MemTotal from /proc/meminfo, so --device cpu has no capacity; name a GPU instead (" +
                device_names() + ")");
}

}  // namespace

const std::vector<DeviceSpec>& gpu_devices() {
  static const std::vector<DeviceSpec> devices = {
      {"A100-40GB", 40 * kGB,
       "NVIDIA A100 Tensor Core GPU datasheet: 40GB HBM2 "
       "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
       "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"},
      {"A100-80GB", 80 * kGB,
       "NVIDIA A100 Tensor Core GPU datasheet: 80GB HBM2e "
       "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
       "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"},
      {"H100", 80 * kGB,
       "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 80GB "
       "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)"},
      {"H200", 141 * kGB,
       "NVIDIA H200 Tensor Core GPU product page and datasheet: 141GB HBM3e "
       "(https://www.nvidia.com/en-us/data-center/h200/)"},
      {"RTX4090", 24 * kGB,
       "NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X "
       "(https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/)"},
  };
  return devices;
}

std::string device_names() {
  std::string names;
  for (const DeviceSpec& d : gpu_devices()) names += d.name + "|";
  return names + "cpu";
}

DeviceSpec find_device(std::string_view name) {
  for (const DeviceSpec& d : gpu_devices())
    if (same_name(d.name, name)) return d;
  if (same_name(name, "cpu")) return {"cpu", host_memory_bytes(), "this machine's RAM: MemTotal in /proc/meminfo"};
  throw ValueError(str("--device: must be one of ", device_names(), ", got '", name, "'"));
}

}  // namespace weft::memory
