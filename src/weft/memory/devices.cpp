#include "weft/memory/devices.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "weft/core/error.h"
#include "weft/core/suggest.h"
#include "weft/monitor/hierarchy.h"

namespace weft::memory {

namespace {

constexpr int64_t kGB = 1000 * 1000 * 1000;
constexpr double kTera = 1e12;

// Cloud prices: AWS EC2 on-demand in us-east-1, an 8-GPU instance's hourly price divided by 8;
// where AWS has no such instance, the provider named. Spot: 30% of on-demand, the conservative end of
// the 70-90% discount spot capacity sells at ("up to 90% off", https://aws.amazon.com/ec2/spot/);
// real spot prices move by the hour. The on-demand figures are the providers' list prices as
// published at kPriceSnapshot, entered by hand: the machines weft is built and tested on cannot
// reach the providers, so no test or run here checked them against a live price list.
constexpr double kSpotFraction = 0.3;
const std::string kSpotRule = "; spot = 30% of on-demand (spot sells 70-90% below it: https://aws.amazon.com/ec2/spot/)";

// "RTX 4090", "rtx-4090" and RTX4090 are one device.
bool same_name(std::string_view a, std::string_view b) { return name_key(a) == name_key(b); }

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

// The model's physical cores: distinct (physical id, core id) pairs, so hyperthreads sharing a
// core's FMA units count once; 0 when /proc/cpuinfo has no such fields.
struct CpuInfo {
  int64_t cores = 0;
  double hz = 0;
  bool avx512 = false, avx2_fma = false, avx512_bf16 = false, vnni = false;
  std::string frequency_from;
};

CpuInfo read_cpu_info() {
  CpuInfo info;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, physical_id, flags;
  auto value = [&line] {
    const size_t colon = line.find(':');
    return colon == std::string::npos ? std::string() : line.substr(line.find_first_not_of(" \t", colon + 1));
  };
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("physical id", 0) == 0) physical_id = value();
    else if (line.rfind("core id", 0) == 0) cores.insert({physical_id, value()});
    else if (line.rfind("flags", 0) == 0 && flags.empty()) flags = " " + value() + " ";
  }
  info.cores = static_cast<int64_t>(cores.size());
  auto has = [&flags](const char* flag) { return flags.find(str(" ", flag, " ")) != std::string::npos; };
  info.avx512 = has("avx512f");
  info.avx2_fma = has("avx2") && has("fma");
  info.avx512_bf16 = has("avx512_bf16");
  info.vnni = has("avx512_vnni");
  // The highest frequency the kernel allows, where cpufreq exists (not in most VMs); else the
  // core clock timed on dependent additions (monitor/hierarchy.h). Not /proc/cpuinfo's "cpu MHz":
  // in a VM that is the time-stamp counter's fixed rate (2.3 GHz here, where the cores ran at
  // 3.0 and weft's GEMM measured 103-112% of a "peak" computed from it).
  std::ifstream max_khz("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  int64_t khz = 0;
  if (max_khz >> khz && khz > 0) {
    info.hz = khz * 1e3;
    info.frequency_from = "cpuinfo_max_freq in /sys/devices/system/cpu/cpu0/cpufreq";
  } else {
    info.hz = monitor::clock_rates().core_hz;
    info.frequency_from = "the core clock, timed on dependent additions";
  }
  return info;
}

// Per core and cycle, with two FMA units (the Xeon Scalable and desktop cores since Skylake; some
// Xeon Silver and Bronze parts have one, and reach half): an FMA is 2 FLOPs on every lane.
//   fp32: AVX-512 2 units x 16 lanes x 2 = 64; AVX2 2 x 8 x 2 = 32
//   bf16: AVX512_BF16's dot product takes 32 bf16 pairs per instruction: 2 x 32 x 2 = 128
//   int8: AVX512_VNNI's dot product, 64 byte pairs: 2 x 64 x 2 = 256
//   fp16: weft widens f16 to f32 on the CPU (kernels/cpu/matmul.h), so fp32's rate
DeviceSpec cpu_device() {
  const CpuInfo info = read_cpu_info();
  WEFT_CHECK(info.cores > 0 && info.hz > 0, IOError,
             "cannot read the cores and frequency from /proc/cpuinfo, so --device cpu has no peak; name a GPU instead (",
             device_names(), ")");
  const double fp32_per_cycle = info.avx512 ? 64 : info.avx2_fma ? 32 : 8;
  const double cores_hz = info.cores * info.hz;
  DeviceSpec cpu;
  cpu.name = "cpu";
  cpu.memory_bytes = host_memory_bytes();
  cpu.source = "this machine's RAM: MemTotal in /proc/meminfo";
  cpu.peak = {.bf16 = cores_hz * (info.avx512_bf16 ? 128 : fp32_per_cycle),
              .fp16 = cores_hz * fp32_per_cycle,
              .fp32 = cores_hz * fp32_per_cycle,
              .int8 = cores_hz * (info.vnni ? 256 : fp32_per_cycle),
              .tf32 = 0};
  cpu.compute_source = str(info.cores, " cores (distinct core ids in /proc/cpuinfo) x ", info.hz / 1e9, " GHz (",
                           info.frequency_from, ") x ", fp32_per_cycle, " fp32 FLOPs per cycle (",
                           info.avx512 ? "AVX-512" : info.avx2_fma ? "AVX2" : "SSE",
                           ": two FMA units, 2 FLOPs a lane); memory bandwidth: measure it with weft bench hierarchy");
  cpu.price_source = "this machine: no price; give --usd-per-hour";
  return cpu;
}

}  // namespace

int64_t cpu_cores() { return read_cpu_info().cores; }

double peak_flops(const DeviceSpec& device, std::string_view precision) {
  if (precision == "bf16") return device.peak.bf16;
  if (precision == "fp16") return device.peak.fp16;
  if (precision == "fp32") return device.peak.fp32;
  if (precision == "int8") return device.peak.int8;
  if (precision == "tf32") {
    WEFT_CHECK(device.peak.tf32 > 0, ValueError, "--precision tf32: ", device.name,
               " has no TF32 units (NVIDIA's tensor cores from the A100 on); give fp32");
    return device.peak.tf32;
  }
  throw ValueError(str("--precision: must be one of bf16, fp16, fp32, tf32, int8, got '", precision, "'"));
}

const std::vector<DeviceSpec>& gpu_devices() {
  static const std::vector<DeviceSpec> devices = {
      {"A100-40GB", 40 * kGB,
       "NVIDIA A100 Tensor Core GPU datasheet: 40GB HBM2 "
       "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
       "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)",
       {.bf16 = 312 * kTera, .fp16 = 312 * kTera, .fp32 = 19.5 * kTera, .int8 = 624 * kTera, .tf32 = 156 * kTera},
       1555e9,
       "NVIDIA A100 Tensor Core GPU datasheet (SXM): dense bf16/fp16 312 TFLOPS, fp32 19.5 TFLOPS, TF32 156, "
       "int8 624 TOPS, HBM2 1,555 GB/s",
       32.77 / 8, 32.77 / 8 * kSpotFraction,
       "AWS EC2 p4d.24xlarge (8x A100 40GB) $32.77/hour on demand, us-east-1" + kSpotRule},
      {"A100-80GB", 80 * kGB,
       "NVIDIA A100 Tensor Core GPU datasheet: 80GB HBM2e "
       "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
       "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)",
       {.bf16 = 312 * kTera, .fp16 = 312 * kTera, .fp32 = 19.5 * kTera, .int8 = 624 * kTera, .tf32 = 156 * kTera},
       2039e9,
       "NVIDIA A100 Tensor Core GPU datasheet (SXM): dense bf16/fp16 312 TFLOPS, fp32 19.5 TFLOPS, TF32 156, "
       "int8 624 TOPS, HBM2e 2,039 GB/s",
       40.97 / 8, 40.97 / 8 * kSpotFraction,
       "AWS EC2 p4de.24xlarge (8x A100 80GB) $40.97/hour on demand, us-east-1" + kSpotRule},
      {"H100", 80 * kGB,
       "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 80GB "
       "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)",
       {.bf16 = 989 * kTera, .fp16 = 989 * kTera, .fp32 = 67 * kTera, .int8 = 1979 * kTera, .tf32 = 494.5 * kTera},
       3.35e12,
       "NVIDIA H100 datasheet (SXM): dense bf16/fp16 989 TFLOPS (1,979 with sparsity), fp32 67 TFLOPS, TF32 494.5 "
       "(989 with sparsity), int8 1,979 TOPS, HBM3 3.35 TB/s",
       98.32 / 8, 98.32 / 8 * kSpotFraction,
       "AWS EC2 p5.48xlarge (8x H100) $98.32/hour on demand, us-east-1" + kSpotRule},
      {"H200", 141 * kGB,
       "NVIDIA H200 Tensor Core GPU product page and datasheet: 141GB HBM3e "
       "(https://www.nvidia.com/en-us/data-center/h200/)",
       {.bf16 = 989 * kTera, .fp16 = 989 * kTera, .fp32 = 67 * kTera, .int8 = 1979 * kTera, .tf32 = 494.5 * kTera},
       4.8e12,
       "NVIDIA H200 datasheet (SXM): the H100's compute, dense bf16/fp16 989 TFLOPS, fp32 67 TFLOPS, TF32 494.5, "
       "int8 1,979 TOPS; HBM3e 4.8 TB/s",
       50.44 / 8, 50.44 / 8 * kSpotFraction,
       "CoreWeave NVIDIA HGX H200 (8 GPUs) $50.44/hour on demand (https://www.coreweave.com/pricing)" + kSpotRule},
      {"RTX4090", 24 * kGB,
       "NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X "
       "(https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/)",
       {.bf16 = 165.2 * kTera, .fp16 = 165.2 * kTera, .fp32 = 82.6 * kTera, .int8 = 660.6 * kTera,
        .tf32 = 82.6 * kTera},
       1008e9,
       "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix A (RTX 4090): dense bf16/fp16 tensor with fp32 "
       "accumulate 165.2 TFLOPS, fp32 82.6 TFLOPS, TF32 tensor 82.6 TFLOPS, int8 660.6 TOPS, GDDR6X 1,008 GB/s",
       0.69, 0.69 * kSpotFraction,
       "RunPod RTX 4090 secure cloud $0.69/hour on demand (https://www.runpod.io/pricing)" + kSpotRule},
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
  if (same_name(name, "cpu")) return cpu_device();
  std::vector<std::string> known = {"cpu"};
  for (const DeviceSpec& d : gpu_devices()) known.push_back(d.name);
  throw ValueError(str("--device: must be one of ", device_names(), ", got '", name, "'", did_you_mean(closest_names(name, known))));
}

// Latencies are one message's, end to end between two processes, orders of magnitude as the
// collective libraries measure them (NCCL over NVLink and PCIe, MPI over InfiniBand, TCP through the
// kernel over Ethernet); the ring's latency term only matters for small buffers.
const std::vector<LinkSpec>& links() {
  static const std::vector<LinkSpec> table = {
      {"nvlink", 600e9, 2e-6,
       "NVIDIA A100 datasheet: NVLink 600 GB/s (12 third-generation links); latency ~2 us, NCCL's small-message "
       "time over NVLink"},
      {"pcie4", 32e9, 5e-6,
       "PCI-SIG PCIe 4.0: 16 GT/s x 16 lanes = 32 GB/s per direction (31.5 after 128b/130b coding); latency ~5 us "
       "GPU to GPU through the host bridge"},
      {"pcie5", 64e9, 5e-6, "PCI-SIG PCIe 5.0: 32 GT/s x 16 lanes = 64 GB/s per direction; latency ~5 us as PCIe 4.0"},
      {"ethernet10", 10e9 / 8, 30e-6, "IEEE 802.3 10 Gb/s Ethernet = 1.25 GB/s; latency ~30 us through TCP"},
      {"ethernet25", 25e9 / 8, 30e-6, "IEEE 802.3 25 Gb/s Ethernet = 3.125 GB/s; latency ~30 us through TCP"},
      {"ethernet100", 100e9 / 8, 30e-6, "IEEE 802.3 100 Gb/s Ethernet = 12.5 GB/s; latency ~30 us through TCP"},
      {"infiniband200", 200e9 / 8, 2e-6,
       "NVIDIA ConnectX-6 HDR InfiniBand 200 Gb/s = 25 GB/s; latency ~2 us MPI end to end (RDMA, no kernel)"},
      {"infiniband400", 400e9 / 8, 2e-6,
       "NVIDIA ConnectX-7 NDR InfiniBand 400 Gb/s = 50 GB/s; latency ~2 us MPI end to end (RDMA, no kernel)"},
  };
  return table;
}

std::string link_names() {
  std::string names;
  for (const LinkSpec& l : links()) names += (names.empty() ? "" : "|") + l.name;
  return names;
}

LinkSpec find_link(std::string_view name) {
  for (const LinkSpec& l : links())
    if (same_name(l.name, name)) return l;
  std::vector<std::string> known;
  for (const LinkSpec& l : links()) known.push_back(l.name);
  throw ValueError(str("--link: must be one of ", link_names(), ", got '", name, "'", did_you_mean(closest_names(name, known))));
}

}  // namespace weft::memory
