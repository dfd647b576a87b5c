// Storage: a reference-counted run of bytes on a device. Tensors are views of a Storage
// (shape + strides + offset); several tensors may share one. The bytes are owned through a
// shared_ptr whose deleter returns them to the caching allocator, or which keeps alive
// whatever they were borrowed from (an mmap'd checkpoint, say).
#pragma once
#include <cstddef>
#include <memory>

#include "weft/core/allocator.h"
#include "weft/core/device.h"

namespace weft {

class Storage {
 public:
  Storage() = default;
  // Fresh bytes from the device's caching allocator; `what` as in CachingAllocator::allocate.
  static Storage allocate(size_t nbytes, Device device = Device::cpu(), const CachingAllocator::RequestText& what = {});
  // Bytes owned elsewhere; `owner` keeps them alive as long as any tensor uses them.
  static Storage borrow(void* data, size_t nbytes, std::shared_ptr<void> owner,
                        Device device = Device::cpu());

  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool defined() const { return data_ != nullptr || nbytes_ == 0; }
  long use_count() const { return data_.use_count(); }

 private:
  std::shared_ptr<void> data_;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace weft
