#include "weft/monitor/system.h"

#include <sys/resource.h>

namespace weft::monitor {

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace weft::monitor
