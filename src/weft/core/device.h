// Where a tensor's bytes live. Only the CPU is implemented in this build; CUDA devices are
// named so that the interfaces above (allocator, process groups, autocast) carry the device.
#pragma once
#include <ostream>
#include <string>

namespace weft {

struct Device {
  enum class Type { cpu, cuda };
  Type type = Type::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static const char* type_name(Type type) { return type == Type::cpu ? "cpu" : "cuda"; }
  bool is_cpu() const { return type == Type::cpu; }
  bool operator==(const Device&) const = default;
  std::string name() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline std::ostream& operator<<(std::ostream& out, const Device& d) { return out << d.name(); }

}  // namespace weft
