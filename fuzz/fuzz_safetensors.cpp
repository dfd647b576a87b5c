// libFuzzer's entry point for the safetensors target (targets.h).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::fuzz::read_safetensors(weft::fuzz::as_bytes(data, size));
  return 0;
}
