#include "weft/core/suggest.h"

#include <algorithm>
#include <cctype>

namespace weft {

std::string name_key(std::string_view name) {
  std::string key;
  for (char c : name)
    if (c != ' ' && c != '-' && c != '_') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

namespace {

// Edits from a to b: insertions, deletions, substitutions and swaps of neighbours (optimal string
// alignment distance).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::vector<std::string> closest_names(std::string_view given, const std::vector<std::string>& known) {
  const std::string key = name_key(given);
  if (key.empty()) return {};
  // A third of the name may be wrong, at most three letters: "lr" gets no suggestion from "id".
  const size_t allowed = std::clamp<size_t>(key.size() / 3, 1, 3);
  std::vector<std::pair<size_t, std::string>> close, containing;
  for (const std::string& name : known) {
    const std::string candidate = name_key(name);
    const size_t distance = edit_distance(key, candidate);
    if (key.size() >= 3 && candidate.find(key) != std::string::npos) containing.emplace_back(distance, name);
    else if (distance <= allowed) close.emplace_back(distance, name);
  }
  // A name given in part (A100 of A100-80GB) means those that contain it, not one a letter away (H100).
  if (!containing.empty()) close = containing;
  std::stable_sort(close.begin(), close.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> names;
  for (const auto& [distance, name] : close) names.push_back(name);
  return names;
}

std::string did_you_mean(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string listed;
  for (size_t i = 0; i < names.size(); ++i)
    listed += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return "; did you mean " + listed + "?";
}

}  // namespace weft
