// The page `weft board` answers GET / with: one self-contained HTML document (no outside scripts,
// styles or fonts) drawing every scalar tag as an SVG chart with the runs overlaid, a smoothing
// slider, and a refresh every 5 seconds from /api/runs. The page is monitor/board_page.html,
// embedded at build time (cmake/embed_asset.cmake).
//
// Hooks for tests and curious users: each run's raw line (polyline.raw) and smoothed line
// (polyline.smoothed) carry data-run and data-points, the [step, value] pairs they draw (the raw
// ones exactly as the event files hold them); a series of one point is also drawn as a
// circle.marker with data-run, data-step and data-value; each axis label (text.tick, with
// data-axis "x" or "y") carries the data-value it stands for; .nonfinite says which values a chart
// could not draw; charts sit in section.group by data-group, their tag's first component; clicking
// a legend entry (#legend > span, data-run) hides or shows that run's lines. body gets
// data-ready="true" after the first drawing and data-refreshes counts the drawings; #skipped lists
// the files the server could not read, #empty shows when no run has scalars; data-fetches counts the
// answers from the server (a drawing waits while the mouse is over a chart, so as not to wipe its
// hover).
#pragma once

namespace weft::monitor {

const char* board_page();

}  // namespace weft::monitor
