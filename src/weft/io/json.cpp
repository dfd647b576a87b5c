#include "weft/io/json.h"

#include <cmath>

namespace weft::io {

namespace {

template <typename Json>
std::string excerpt(const Json& value) {
  constexpr size_t kLimit = 80;
  const std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() <= kLimit ? text : text.substr(0, kLimit) + "...";
}

}  // namespace

std::string json_excerpt(const nlohmann::json& value) { return excerpt(value); }
std::string json_excerpt(const nlohmann::ordered_json& value) { return excerpt(value); }

const nlohmann::json& json_field(const nlohmann::json& object, const std::string& key, const std::string& where) {
  WEFT_CHECK(object.is_object(), FormatError, where, ": expected a JSON object, found ", json_excerpt(object));
  auto it = object.find(key);
  WEFT_CHECK(it != object.end(), FormatError, where, ": no \"", key, "\"");
  return *it;
}

int64_t json_integer(const nlohmann::json& object, const std::string& key, const std::string& where, int64_t min,
                     int64_t max) {
  const nlohmann::json& value = json_field(object, key, where);
  const bool fits = value.is_number_integer() &&
                    (!value.is_number_unsigned() ||
                     value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  WEFT_CHECK(fits && value.get<int64_t>() >= min && value.get<int64_t>() <= max, FormatError, where, ": \"", key,
             "\" must be an integer in [", min, ", ", max, "], found ", json_excerpt(value));
  return value.get<int64_t>();
}

double json_number(const nlohmann::json& object, const std::string& key, const std::string& where, double min,
                   double max) {
  const nlohmann::json& value = json_field(object, key, where);
  WEFT_CHECK(value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() >= min &&
                 value.get<double>() <= max,
             FormatError, where, ": \"", key, "\" must be a number in [", min, ", ", max, "], found ",
             json_excerpt(value));
  return value.get<double>();
}

std::string json_string(const nlohmann::json& object, const std::string& key, const std::string& where) {
  const nlohmann::json& value = json_field(object, key, where);
  WEFT_CHECK(value.is_string(), FormatError, where, ": \"", key, "\" must be a string, found ", json_excerpt(value));
  return value.get<std::string>();
}

uint64_t decimal_integer(const std::string& text, const std::string& where, uint64_t max) {
  uint64_t value = 0;
  bool ok = !text.empty() && text.size() <= 20;
  for (char c : text) {
    ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(value, 10, &value) &&
         !__builtin_add_overflow(value, static_cast<uint64_t>(c - '0'), &value);
    if (!ok) break;
  }
  WEFT_CHECK(ok && value <= max, FormatError, where, ": expected a decimal integer in [0, ", max, "], found ",
             json_excerpt(nlohmann::json(text)));
  return value;
}

}  // namespace weft::io
