#include "weft/core/storage.h"

#include "weft/core/allocator.h"
#include "weft/core/error.h"

namespace weft {

Storage Storage::allocate(size_t nbytes, Device device, const CachingAllocator::RequestText& what) {
  WEFT_CHECK(device.is_cpu(), DeviceError, "cannot allocate on ", device.name(),
             ": this build of weft has no CUDA support");
  Storage s;
  CachingAllocator* allocator = &CachingAllocator::cpu();
  void* p = allocator->allocate(nbytes, what);
  s.data_ = std::shared_ptr<void>(p, [allocator](void* q) { allocator->deallocate(q); });
  s.nbytes_ = nbytes;
  s.device_ = device;
  return s;
}

Storage Storage::borrow(void* data, size_t nbytes, std::shared_ptr<void> owner, Device device) {
  Storage s;
  s.data_ = std::shared_ptr<void>(std::move(owner), data);
  s.nbytes_ = nbytes;
  s.device_ = device;
  return s;
}

}  // namespace weft
