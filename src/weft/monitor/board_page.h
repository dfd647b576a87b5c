// The page `weft board` answers GET / with: one self-contained HTML document (no outside scripts,
// styles or fonts) drawing every scalar tag as an SVG chart with the runs overlaid, a smoothing
// slider, and a refresh every 5 seconds from /api/runs.
#pragma once

namespace weft::monitor {

const char* board_page();

}  // namespace weft::monitor
