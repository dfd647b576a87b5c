// "Did you mean": the names a mistyped one was probably meant to be, for the command line's
// unknown commands and flags and for the named values the layers look up (devices, links).
// Names compare with case, spaces, dashes and underscores ignored ("RTX 4090" is rtx4090), and
// are close within a few edits, a swap of two neighbours counting as one ("trian" is train).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace weft {

// `name` lowercased, without spaces, dashes and underscores: the form names are compared in.
std::string name_key(std::string_view name);

// The names of `known` that `given` was probably meant to be, closest first: those it is a part of
// ("a100" of A100-80GB), or where there are none, those within a few edits of it. Empty when none is.
std::vector<std::string> closest_names(std::string_view given, const std::vector<std::string>& known);

// "; did you mean X?" or "; did you mean X or Y?" for closest_names, "" when there are none.
std::string did_you_mean(const std::vector<std::string>& names);

}  // namespace weft
