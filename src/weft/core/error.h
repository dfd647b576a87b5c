// weft's exceptions. Every error a user can cause is a weft::Error subclass whose message says
// what was expected, what was found, and (where it helps) what to do. Nothing in weft aborts
// the process on bad input.
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace weft {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error { using Error::Error; };
class DTypeError : public Error { using Error::Error; };
class DeviceError : public Error { using Error::Error; };
class IndexError : public Error { using Error::Error; };
class ValueError : public Error { using Error::Error; };
// An allocation that could not be served; `requested_bytes` is its size, so a caller can say
// what the memory had to hold.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& what, int64_t requested_bytes = 0)
      : Error(what), requested_bytes(requested_bytes) {}
  int64_t requested_bytes;
};
// A file that cannot be opened, read or written (the message names the path and errno's text).
class IOError : public Error { using Error::Error; };
// A file whose content is malformed (wrong magic, truncated, inconsistent header).
class FormatError : public Error { using Error::Error; };
// Training whose loss stopped being a finite number: the message names the step and what to try.
class DivergedError : public Error { using Error::Error; };

// Concatenates anything streamable: str("expected ", a, ", got ", b).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace weft

// WEFT_CHECK(cond, ShapeError, "matmul: ", ...) throws ShapeError with the concatenated message.
#define WEFT_CHECK(cond, ErrorType, ...)                                 \
  do {                                                                   \
    if (!(cond)) throw ::weft::ErrorType(::weft::str(__VA_ARGS__));      \
  } while (0)
