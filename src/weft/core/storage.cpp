#include "weft/core/storage.h"

#include "weft/core/allocator.h"
#include "weft/core/error.h"

namespace weft {

Storage Storage::allocate(size_t nbytes, Device device, const CachingAllocator::RequestText& what) {
  CachingAllocator* allocator = allocator_for(device.type);
  WEFT_CHECK(allocator, DeviceError, "cannot allocate on ", device.name(), ": no allocator is registered for ",
             Device::type_name(device.type), " (this build of weft has no CUDA support)");
  // One allocator per device type so far: a second device's memory would come from the first's.
  WEFT_CHECK(device.index == 0, DeviceError, "cannot allocate on ", device.name(), ": weft uses only device 0 of ",
             Device::type_name(device.type), " so far (", Device::type_name(device.type), ":0)");
  void* p = allocator->allocate(nbytes, what);
  Storage s;
  s.bytes_ = std::make_shared<Bytes>(
      Bytes{std::shared_ptr<void>(p, [allocator](void* q) { allocator->deallocate(q); }), nbytes, device});
  return s;
}

void Storage::resize_(size_t nbytes) {
  WEFT_CHECK(bytes_ && !bytes_->borrowed, ValueError, "Storage::resize_: only bytes from the allocator can be resized");
  bytes_->data.reset();  // first, so the allocator can hand the same block back
  bytes_->nbytes = 0;
  if (nbytes == 0) return;
  Storage fresh = allocate(nbytes, bytes_->device);
  bytes_->data = fresh.bytes_->data;
  bytes_->nbytes = nbytes;
}

Storage Storage::borrow(void* data, size_t nbytes, std::shared_ptr<void> owner, Device device) {
  Storage s;
  s.bytes_ = std::make_shared<Bytes>(Bytes{std::shared_ptr<void>(std::move(owner), data), nbytes, device, true});
  return s;
}

}  // namespace weft
