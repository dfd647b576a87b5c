// The command that started this weft, as the user typed it (`build/weft`, or `weft` from PATH),
// so that every command weft prints as advice ("resume with ...") runs when pasted as printed.
#pragma once
#include <string>

namespace weft {

const std::string& program_name();        // "weft" until main sets it
void set_program_name(const char* argv0);  // argv[0]: a path as typed, or a name found on PATH

// `word` as a shell reads it back: as it is when it holds nothing the shell would interpret,
// otherwise in single quotes.
std::string shell_quote(const std::string& word);

}  // namespace weft
