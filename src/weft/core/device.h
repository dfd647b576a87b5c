// Where a tensor's bytes live: the host (the CPU's kernels), or a CUDA device, whose memory the
// CUDA backend (kernels/cuda/device.h) serves where weft is built with it.
#pragma once
#include <ostream>
#include <string>

namespace weft {

struct Device {
  enum class Type { cpu, cuda };
  Type type = Type::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Type::cuda, index}; }
  static const char* type_name(Type type) { return type == Type::cpu ? "cpu" : "cuda"; }
  bool is_cpu() const { return type == Type::cpu; }
  bool operator==(const Device&) const = default;
  std::string name() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline std::ostream& operator<<(std::ostream& out, const Device& d) { return out << d.name(); }

}  // namespace weft
