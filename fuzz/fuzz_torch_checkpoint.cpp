// libFuzzer's entry point for the torch_checkpoint target (targets.h).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::fuzz::read_torch_checkpoint(weft::fuzz::as_bytes(data, size));
  return 0;
}
