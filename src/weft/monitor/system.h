// What the operating system says about this process.
#pragma once
#include <cstdint>

namespace weft::monitor {

// The process's peak resident set size (getrusage's ru_maxrss), in bytes.
int64_t peak_rss_bytes();

}  // namespace weft::monitor
