// The page `weft serve` answers GET / with: one self-contained HTML document (no outside scripts,
// styles or fonts: nothing beyond the machine need be reachable) where a user picks a test image
// or draws one and sees the classifier's probabilities as a bar chart, or types a prompt and
// watches the GPT's tokens stream in. It only calls the server's own API.
#pragma once

namespace weft::serve {

const char* playground_page();

}  // namespace weft::serve
