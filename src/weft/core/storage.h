// Storage: a reference-counted run of bytes on a device. Tensors are views of a Storage
// (shape + strides + offset); several tensors may share one. The bytes are owned through a
// shared_ptr whose deleter returns them to the caching allocator, or which keeps alive
// whatever they were borrowed from (an mmap'd checkpoint, say).
//
// Copies of a Storage share one set of bytes, and resize_ swaps those bytes for every copy at
// once: ZeRO-3 frees a layer's gathered parameters between their forward and their backward
// (Storage::resize_(0)) while the autograd graph still holds views of them, and gathers them into
// fresh bytes of the same storage before the backward reads them, as PyTorch's FSDP resizes its
// storages. A tensor must not be read while its storage holds fewer bytes than it spans.
#pragma once
#include <cstddef>
#include <memory>

#include "weft/core/allocator.h"
#include "weft/core/device.h"

namespace weft {

class Storage {
 public:
  Storage() = default;
  // Fresh bytes from the caching allocator registered for the device's type (allocator_for);
  // `what` as in CachingAllocator::allocate. DeviceError when that type has none.
  static Storage allocate(size_t nbytes, Device device = Device::cpu(), const CachingAllocator::RequestText& what = {});
  // Bytes owned elsewhere; `owner` keeps them alive as long as any tensor uses them.
  static Storage borrow(void* data, size_t nbytes, std::shared_ptr<void> owner,
                        Device device = Device::cpu());

  void* data() const { return bytes_ ? bytes_->data.get() : nullptr; }
  size_t nbytes() const { return bytes_ ? bytes_->nbytes : 0; }
  Device device() const { return bytes_ ? bytes_->device : Device::cpu(); }
  bool defined() const { return data() != nullptr || nbytes() == 0; }
  // How many Storage objects share these bytes.
  long use_count() const { return bytes_.use_count(); }
  // Replaces the bytes of this storage, for every copy of it, with `nbytes` fresh ones from the
  // caching allocator (their contents undefined), or none for 0; the old bytes go back now.
  // Borrowed bytes cannot be resized (ValueError).
  void resize_(size_t nbytes);

 private:
  struct Bytes {
    std::shared_ptr<void> data;
    size_t nbytes = 0;
    Device device;
    bool borrowed = false;
  };
  std::shared_ptr<Bytes> bytes_;
};

}  // namespace weft
