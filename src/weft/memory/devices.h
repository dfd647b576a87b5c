// The devices `weft plan` checks a plan against: each named device's memory as its maker's datasheet
// states it, with the datasheet, and `cpu`, this machine's RAM.
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

struct DeviceSpec {
  std::string name;      // as the --device flag spells it
  int64_t memory_bytes;  // the capacity checked against
  std::string source;    // where the figure comes from
};

// The GPUs, in the order `weft plan --help` lists them (cpu is not among them: it is measured).
const std::vector<DeviceSpec>& gpu_devices();

// A GPU by name (case-insensitive), or "cpu": MemTotal of /proc/meminfo. Unknown names are a
// ValueError listing the known ones.
DeviceSpec find_device(std::string_view name);

// Every accepted --device name, "A100-40GB|...|cpu".
std::string device_names();

}  // namespace weft::memory
