// libFuzzer's entry point for the http target (targets.h).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::fuzz::answer_http(weft::fuzz::as_bytes(data, size));
  return 0;
}
