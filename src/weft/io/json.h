// JSON that comes from a file (trainer.json, a safetensors header, metadata values): parsed with
// its nesting bounded and duplicate keys refused, and read field by field with each field's type
// and range checked. Every failure is a FormatError that starts with `where` (the file, and the
// metadata key when the JSON is a value inside a file: "m.safetensors: weft.gpt") and says what
// was expected and found, so no nlohmann exception (type_error, out_of_range, parse_error) ever
// leaves a reader.
//
// Nesting is bounded because nlohmann's dump and comparison recurse once per level: a header of
// 100,000 '[' would otherwise overflow the stack. weft's own files nest at most 4 levels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/error.h"

namespace weft::io {

constexpr int kMaxJsonDepth = 64;

// One line, cut short: a JSON value or a key as an error message may quote it.
std::string json_excerpt(const nlohmann::json& value);
std::string json_excerpt(const nlohmann::ordered_json& value);

// `also` sees every parse event after the checks, as nlohmann's callback does (returning false
// leaves the value out of the tree).
template <typename Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth,
                const typename Json::parser_callback_t& also = nullptr) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows it;
  // JSON text cannot contain a raw NUL.
  const size_t nul = text.find('\0');
  WEFT_CHECK(nul == std::string_view::npos, FormatError, where, " is not valid JSON: NUL byte at offset ", nul);
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> duplicate;
  typename Json::parser_callback_t check = [&](int depth, typename Json::parse_event_t event, Json& parsed) {
    using Event = typename Json::parse_event_t;
    if ((event == Event::object_start || event == Event::array_start) && depth >= max_depth)
      throw FormatError(
          str(where, " nests JSON more than ", max_depth, " levels deep; the file is corrupt or not what it claims"));
    if (event == Event::object_start) open_objects.emplace_back();
    if (event == Event::object_end) open_objects.pop_back();
    if (event == Event::key && !open_objects.back().insert(parsed.template get<std::string>()).second && !duplicate)
      duplicate = parsed.template get<std::string>();
    return also ? also(depth, event, parsed) : true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const typename Json::exception& e) {  // parse_error, or out_of_range for a number too large
    std::string_view why = e.what();
    why.remove_prefix(std::min(why.size(), why.find("] ") + 2));  // drop "[json.exception.parse_error.101] "
    throw FormatError(str(where, " is not valid JSON: ", why));
  }
  WEFT_CHECK(!duplicate, FormatError, where, " has the key ", json_excerpt(Json(*duplicate)),
             " more than once in one object");
  return json;
}

// object[key], which must exist (`object` must be a JSON object).
const nlohmann::json& json_field(const nlohmann::json& object, const std::string& key, const std::string& where);
// An integer in [min, max] (a float, a string or an out-of-range number is refused).
int64_t json_integer(const nlohmann::json& object, const std::string& key, const std::string& where,
                     int64_t min = std::numeric_limits<int64_t>::min(),
                     int64_t max = std::numeric_limits<int64_t>::max());
// A finite number in [min, max].
double json_number(const nlohmann::json& object, const std::string& key, const std::string& where,
                   double min = -std::numeric_limits<double>::max(), double max = std::numeric_limits<double>::max());
std::string json_string(const nlohmann::json& object, const std::string& key, const std::string& where);
// A string holding a decimal integer in [0, max], as weft writes values JSON numbers would round
// (u64 words) or safetensors metadata (strings only) holds.
uint64_t decimal_integer(const std::string& text, const std::string& where,
                         uint64_t max = std::numeric_limits<uint64_t>::max());

}  // namespace weft::io
