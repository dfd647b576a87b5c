// Checking what an error says, not only that it was thrown.
#pragma once
#include <gtest/gtest.h>

#include <string>

namespace weft::testing {

// Expects `call` to throw ErrorType and returns its message.
template <typename ErrorType, typename Call>
std::string message_of(Call&& call) {
  try {
    call();
  } catch (const ErrorType& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace weft::testing
