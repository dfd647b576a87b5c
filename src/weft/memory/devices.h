// The one table of devices behind `weft plan` and `weft estimate`: each named device's memory,
// peak dense FLOPS per number format, memory bandwidth and hourly price, every figure with where it
// comes from, and `cpu`, this machine, whose figures are read from the OS at run time. Beside them,
// the links gradients travel over (find_link). The table is C++ rather than a data file so that
// every figure sits next to its source in one reviewed place and the binary needs no file beside it.
//
// Peak FLOPS are the datasheets' dense figures: NVIDIA also quotes "with sparsity" figures, twice
// as large, which need 2:4 structured-sparse weights that weft never produces, so they are not used.
// Prices are a snapshot (kPriceSnapshot): cloud prices change and differ by region, so
// `weft estimate cost` takes --usd-per-hour / --spot-usd-per-hour to override them.
//
// Capacities are the datasheets' figures read as decimal bytes ("80GB" = 80e9 bytes) and the whole
// of it is taken as usable: no further fraction. The memory on these boards is built from
// binary-sized chips, so the figure a CUDA program sees is larger (an A100 40GB reports 42,405,855,232
// bytes, 6% more than 40e9); that difference is what the CUDA context, the driver and the caching
// allocator's fragmentation take, which the planner's allocator-level peak does not count.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft::memory {

// Dense peak floating-point (int8: integer) operations per second, by the format the multiplies take.
// tf32: f32 matrices multiplied on the tensor cores with 10 of their 23 mantissa bits (A100 on; what
// PyTorch's allow_tf32 turns on), the values f32 in memory; 0 where there is no such unit (a CPU).
struct PeakFlops {
  double bf16 = 0, fp16 = 0, fp32 = 0, int8 = 0, tf32 = 0;
};

struct DeviceSpec {
  std::string name;      // as the --device flag spells it
  int64_t memory_bytes;  // the capacity checked against
  std::string source;    // where the memory figure comes from
  PeakFlops peak;
  double memory_bandwidth = 0;  // bytes per second
  std::string compute_source;   // where the peak and bandwidth figures come from
  double usd_per_hour = 0;      // one device, on demand; 0: no price in the table
  double spot_usd_per_hour = 0;
  std::string price_source;
};

// The date the prices in the table were taken.
inline constexpr const char* kPriceSnapshot = "2024-12";

// The peak for a --precision name (bf16, fp16, fp32, tf32, int8); anything else, and tf32 on a
// device without it, is a ValueError.
double peak_flops(const DeviceSpec& device, std::string_view precision);

// A link between devices: bandwidth per direction and the latency of one message over it.
struct LinkSpec {
  std::string name;
  double bandwidth;  // bytes per second
  double latency;    // seconds
  std::string source;
};

const std::vector<LinkSpec>& links();
// A link by name (case-insensitive); unknown names are a ValueError listing the known ones.
LinkSpec find_link(std::string_view name);
std::string link_names();  // "nvlink|pcie4|..."

// The GPUs, in the order `weft plan --help` lists them (cpu is not among them: it is measured).
const std::vector<DeviceSpec>& gpu_devices();

// A GPU by name (case, spaces and dashes ignored: "RTX 4090" is RTX4090), or "cpu": this machine,
// MemTotal of /proc/meminfo and its peak from /proc/cpuinfo (cpu_peak_flops). Unknown names are a
// ValueError listing the known ones and suggesting the closest (A100: A100-40GB or A100-80GB).
DeviceSpec find_device(std::string_view name);

// This machine's physical cores, as the cpu device's peak counts them (0: /proc/cpuinfo does not say).
int64_t cpu_cores();

// Every accepted --device name, "A100-40GB|...|cpu".
std::string device_names();

}  // namespace weft::memory
