// The page `weft serve` answers GET / with: one self-contained HTML document (no outside scripts,
// styles or fonts: nothing beyond the machine need be reachable) where a user picks a test image
// or draws one and sees the classifier's probabilities as a bar chart, or types a prompt and
// watches the GPT's tokens stream in. It only calls the server's own API. The page is
// serve/playground.html, embedded at build time (cmake/embed_asset.cmake).
//
// Hooks for tests and curious users: window.lastPixels holds the 784 values the last prediction
// sent; each bar carries data-label and data-probability; #completion ends with the whole text.
#pragma once

namespace weft::serve {

const char* playground_page();

}  // namespace weft::serve
