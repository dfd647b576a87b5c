#include "weft/monitor/board_page.h"

namespace weft::monitor {

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
const char* board_page() {
  return R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>weft board</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
  header { display: flex; flex-wrap: wrap; align-items: center; gap: 0.5em 1.5em; margin-bottom: 0.8em; }
  h1 { font-size: 1.4em; margin: 0; }
  #controls { display: flex; align-items: center; gap: 0.5em; }
  #smoothing-value { min-width: 2.5em; font-variant-numeric: tabular-nums; }
  #status { color: #666; font-size: 0.9em; }
  #legend { display: flex; flex-wrap: wrap; gap: 0.3em 1.2em; margin-bottom: 0.8em; max-height: 7.5em;
            overflow-y: auto; }
  #legend > span { display: inline-flex; align-items: center; max-width: 28em; cursor: pointer; user-select: none; }
  #legend > span.hidden { opacity: 0.35; text-decoration: line-through; }
  #legend .name { min-width: 0; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  #legend i { flex: none; width: 1.5em; height: 0.3em; margin-right: 0.4em; }
  .group h2 { font-size: 1.1em; margin: 1em 0 0.5em 0; color: #444; }
  .group .grid { display: flex; flex-wrap: wrap; gap: 1em; }
  .chart { border: 1px solid #ddd; border-radius: 4px; padding: 0.5em; width: 400px; }
  .chart h3 { font-size: 1em; margin: 0 0 0.3em 0; font-weight: 600; overflow-wrap: anywhere; }
  .chart .hover { font-size: 0.8em; color: #444; min-height: 1.2em; font-variant-numeric: tabular-nums;
                  overflow-wrap: anywhere; }
  .chart .nonfinite { font-size: 0.8em; color: #b00; }
  svg { display: block; }
  svg text { font-size: 10px; fill: #555; }
  line.grid { stroke: #eee; }
  polyline.raw { fill: none; stroke-width: 1; opacity: 0.35; }
  polyline.smoothed { fill: none; stroke-width: 2; }
  #skipped { color: #b00; }
  #error { color: #b00; }
  #empty { color: #666; padding: 2em 0; }
</style>
</head>
<body>
<header>
  <h1>weft board</h1>
  <div id="controls">
    <label for="smoothing">Smoothing</label>
    <input id="smoothing" type="range" min="0" max="0.99" step="0.01" value="0.6">
    <output id="smoothing-value" for="smoothing">0.60</output>
  </div>
  <span id="status"></span>
</header>
<div id="legend"></div>
<ul id="skipped"></ul>
<div id="error"></div>
<div id="empty" hidden></div>
<div id="charts"></div>
<script>
"use strict";
const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf"];
// Past the palette, hues a golden angle apart: many runs stay told apart instead of repeating colours.
const colourOf = i => i < palette.length ? palette[i] : `hsl(${(i * 137.508) % 360}, 65%, 42%)`;
const width = 400, height = 240, padLeft = 58, padRight = 14, padTop = 10, padBottom = 34;
const svgNS = "http://www.w3.org/2000/svg";
let board = null;
let refreshes = 0, fetches = 0;
// A chart is rebuilt on each drawing, which would take its hover line away under the mouse: while
// the mouse is over one, new data waits, and is drawn when it leaves.
let hovering = false, waiting = false;
const hiddenRuns = new Set();  // runs the user clicked off in the legend, kept across refreshes

// TensorBoard's smoothing: an exponential moving average, debiased so that the first points are
// not pulled towards zero.
function smooth(values, weight) {
  let last = 0, count = 0;
  return values.map(v => {
    last = last * weight + (1 - weight) * v;
    count += 1;
    const debias = weight === 0 ? 1 : 1 - Math.pow(weight, count);
    return last / debias;
  });
}

function el(name, attributes, parent) {
  const node = document.createElementNS(svgNS, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (parent) parent.appendChild(node);
  return node;
}

// Numbers as TensorBoard writes them: 1.2k and 3.5M for large ones, 3e-4 for small ones, at most
// `digits` significant digits. Non-finite values arrive as the strings "NaN", "Infinity", "-Infinity".
function compact(value, digits) {
  if (typeof value !== "number") return value === "Infinity" ? "+inf" : value === "-Infinity" ? "-inf" : value;
  if (value === 0) return "0";
  const rounded = Number(value.toPrecision(digits)), magnitude = Math.abs(rounded);
  if (magnitude < 0.01 || magnitude >= 1e15) {
    const [mantissa, exponent] = rounded.toExponential(digits - 1).split("e");
    return String(Number(mantissa)) + "e" + Number(exponent);
  }
  if (magnitude < 1000) return String(rounded);
  const thousands = Math.floor(Math.log10(magnitude) / 3);
  return String(Number((rounded / Math.pow(1000, thousands)).toPrecision(digits))) + "kMGT"[thousands - 1];
}

const byteUnits = ["B", "KiB", "MiB", "GiB", "TiB"];
const isBytes = tag => /bytes$/.test(tag);
// The power of 1024 whose unit writes `value` with one to four digits before the point.
const byteExponent = value =>
    Math.max(0, Math.min(byteUnits.length - 1, Math.floor(Math.log2(Math.abs(value) || 1) / 10)));

function valueText(tag, value) {
  if (!isBytes(tag) || typeof value !== "number") return compact(value, 4);
  const exponent = byteExponent(value);
  return compact(value / Math.pow(1024, exponent), 4) + " " + byteUnits[exponent];
}

// d3's (and so TensorBoard's) tick spacing: 1, 2 or 5 x 10^k, about `count` intervals over [lo, hi].
function tickStep(lo, hi, count) {
  const rough = (hi - lo) / count, power = Math.pow(10, Math.floor(Math.log10(rough))), error = rough / power;
  return power * (error >= Math.sqrt(50) ? 10 : error >= Math.sqrt(10) ? 5 : error >= Math.sqrt(2) ? 2 : 1);
}

// The multiples of `step` in [lo, hi]; a step below 1 divides by its inverse, so the third tick of
// 0.1 is 0.3 and not 0.30000000000000004.
function ticks(lo, hi, step) {
  const values = [];
  for (let i = Math.ceil(lo / step - 1e-9); i <= Math.floor(hi / step + 1e-9); ++i)
    values.push(step >= 1 ? i * step : i / Math.round(1 / step));
  return values;
}

// Enough significant digits for neighbouring ticks to read differently (a float32 has no more than 9).
const tickDigits = (values, step) => Math.min(9, Math.max(1,
    Math.floor(Math.log10(Math.max(...values.map(Math.abs), step))) - Math.floor(Math.log10(step)) + 1));

function drawChart(tag, series, weight) {
  const box = document.createElement("div");
  box.className = "chart";
  box.dataset.tag = tag;
  const title = document.createElement("h3");
  title.textContent = tag;
  box.appendChild(title);
  const finite = series.map(s => s.points.filter(p => Number.isFinite(p[2])));
  const all = series.flatMap(s => s.points), drawn = finite.flat();
  let [x0, x1] = [Math.min(...all.map(p => p[0])), Math.max(...all.map(p => p[0]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  // The y axis is drawn in the unit its labels use (MiB for bytes), its ends rounded out to ticks.
  const unit = isBytes(tag) ? Math.pow(1024, byteExponent(Math.max(...drawn.map(p => Math.abs(p[2])), 0))) : 1;
  let [y0, y1] = drawn.length ? [Math.min(...drawn.map(p => p[2])) / unit, Math.max(...drawn.map(p => p[2])) / unit]
                              : [0, 1];
  if (y0 === y1) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
  const yStep = tickStep(y0, y1, 5);
  [y0, y1] = [Math.floor(y0 / yStep + 1e-9) * yStep, Math.ceil(y1 / yStep - 1e-9) * yStep];
  const xStep = Math.max(1, tickStep(x0, x1, 5));  // steps are whole numbers
  const x = step => padLeft + (step - x0) / (x1 - x0) * (width - padLeft - padRight);
  const y = value => padTop + (y1 - value / unit) / (y1 - y0) * (height - padTop - padBottom);
  const svg = el("svg", {width, height, viewBox: `0 0 ${width} ${height}`}, box);
  const yTicks = ticks(y0, y1, yStep), xTicks = ticks(x0, x1, xStep);
  const yDigits = tickDigits(yTicks, yStep), xDigits = tickDigits(xTicks, xStep);
  const unitName = isBytes(tag) ? " " + byteUnits[Math.log2(unit) / 10] : "";
  for (const v of yTicks) {
    const at = y(v * unit);
    el("line", {class: "grid", x1: padLeft, x2: width - padRight, y1: at, y2: at}, svg);
    el("text", {class: "tick", "data-axis": "y", "data-value": v * unit, x: padLeft - 6, y: at + 3,
                "text-anchor": "end"}, svg).textContent = compact(v, yDigits) + unitName;
  }
  for (const s of xTicks) {
    el("line", {class: "grid", x1: x(s), x2: x(s), y1: padTop, y2: height - padBottom}, svg);
    el("text", {class: "tick", "data-axis": "x", "data-value": s, x: x(s), y: height - padBottom + 14,
                "text-anchor": "middle"}, svg).textContent = compact(s, xDigits);
  }
  el("rect", {x: padLeft, y: padTop, width: width - padLeft - padRight, height: height - padTop - padBottom,
              fill: "none", stroke: "#ccc"}, svg);
  el("text", {x: (padLeft + width - padRight) / 2, y: height - 4, "text-anchor": "middle"}, svg).textContent = "step";
  series.forEach((s, i) => {
    const raw = finite[i].map(p => [p[0], p[2]]);
    const smoothed = smooth(raw.map(p => p[1]), weight).map((v, j) => [raw[j][0], v]);
    for (const [kind, points] of [["raw", raw], ["smoothed", smoothed]]) {
      el("polyline", {class: kind, stroke: s.colour, "data-run": s.run, "data-points": JSON.stringify(points),
                      points: points.map(p => `${x(p[0]).toFixed(2)},${y(p[1]).toFixed(2)}`).join(" ")}, svg);
    }
    // A line through one point is invisible: a run that evaluated once shows as a dot.
    if (raw.length === 1)
      el("circle", {class: "marker", fill: s.colour, r: 4, cx: x(raw[0][0]).toFixed(2), cy: y(raw[0][1]).toFixed(2),
                    "data-run": s.run, "data-step": raw[0][0], "data-value": raw[0][1]}, svg);
  });
  const nonfinite = series.flatMap(s => s.points.filter(p => !Number.isFinite(p[2]))
                                               .map(p => `${s.run} step ${p[0]}: ${compact(p[2])}`));
  if (nonfinite.length) {
    const note = document.createElement("div");
    note.className = "nonfinite";
    note.textContent = "not drawn: " + nonfinite.slice(0, 3).join(", ") +
                       (nonfinite.length > 3 ? ` and ${nonfinite.length - 3} more` : "");
    box.appendChild(note);
  }
  const hover = document.createElement("div");
  hover.className = "hover";
  box.appendChild(hover);
  const cursor = el("line", {y1: padTop, y2: height - padBottom, stroke: "#888", "stroke-dasharray": "3 3",
                             visibility: "hidden"}, svg);
  svg.addEventListener("mousemove", event => {
    hovering = true;
    const bounds = svg.getBoundingClientRect();
    const step = x0 + (event.clientX - bounds.left - padLeft) / (width - padLeft - padRight) * (x1 - x0);
    const parts = [];
    for (const s of series) {
      let nearest = null;
      for (const p of s.points) if (!nearest || Math.abs(p[0] - step) < Math.abs(nearest[0] - step)) nearest = p;
      if (nearest) parts.push(`${s.run}: step ${nearest[0]}, ${valueText(tag, nearest[2])}`);
    }
    cursor.setAttribute("x1", event.clientX - bounds.left);
    cursor.setAttribute("x2", event.clientX - bounds.left);
    cursor.setAttribute("visibility", "visible");
    hover.textContent = parts.join("  |  ");
  });
  svg.addEventListener("mouseleave", () => {
    cursor.setAttribute("visibility", "hidden");
    hover.textContent = "";
    hovering = false;
    if (waiting) draw();
  });
  return box;
}

function draw() {
  if (!board) return;
  waiting = false;
  const weight = Number(document.getElementById("smoothing").value);
  document.getElementById("smoothing-value").textContent = weight.toFixed(2);
  const colour = new Map(board.runs.map((r, i) => [r.name, colourOf(i)]));
  const legend = document.getElementById("legend");
  legend.replaceChildren(...board.runs.map(r => {
    const item = document.createElement("span");
    item.dataset.run = r.name;
    item.title = r.name + " (click to hide or show)";
    const swatch = document.createElement("i");
    swatch.style.background = colour.get(r.name);
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = r.name;
    item.append(swatch, name);
    item.classList.toggle("hidden", hiddenRuns.has(r.name));
    item.addEventListener("click", () => {
      if (!hiddenRuns.delete(r.name)) hiddenRuns.add(r.name);
      draw();
    });
    return item;
  }));
  const skipped = document.getElementById("skipped");
  skipped.replaceChildren(...board.skipped.map(s => {
    const item = document.createElement("li");
    item.dataset.file = s.file;
    item.textContent = `skipped ${s.file}: ${s.reason}`;
    return item;
  }));
  const empty = document.getElementById("empty");
  empty.hidden = board.runs.length > 0;
  empty.textContent = `No scalars under ${board.logdir} yet: a run appears here once weft train has logged its ` +
                      "first step (the page looks again every 5 seconds).";
  // As in TensorBoard, the charts are grouped by their tag's first component: train/, test/, memory/.
  const shown = board.runs.filter(r => !hiddenRuns.has(r.name));
  const tags = [...new Set(shown.flatMap(r => Object.keys(r.tags)))].sort();
  const groups = new Map();
  for (const tag of tags) {
    const group = tag.includes("/") ? tag.slice(0, tag.indexOf("/")) : "";
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(drawChart(tag, shown.filter(r => tag in r.tags).map(
        r => ({run: r.name, colour: colour.get(r.name), points: r.tags[tag]})), weight));
  }
  document.getElementById("charts").replaceChildren(...[...groups].map(([name, charts]) => {
    const section = document.createElement("section");
    section.className = "group";
    section.dataset.group = name;
    const title = document.createElement("h2");
    title.textContent = name || "(no group)";
    const grid = document.createElement("div");
    grid.className = "grid";
    grid.append(...charts);
    section.append(title, grid);
    return section;
  }));
  refreshes += 1;
  document.body.dataset.refreshes = refreshes;
  document.body.dataset.ready = "true";
}

async function refresh() {
  try {
    const response = await fetch("/api/runs", {cache: "no-store"});
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    board = body;
    document.getElementById("error").textContent = "";
    const runs = board.runs.length;
    document.getElementById("status").textContent =
        `${runs} ${runs === 1 ? "run" : "runs"} under ${board.logdir}, read at ${new Date().toLocaleTimeString()}`;
    if (hovering) waiting = true;
    else draw();
  } catch (error) {
    document.getElementById("error").textContent = `cannot read the runs: ${error.message}`;
  } finally {
    fetches += 1;
    document.body.dataset.fetches = fetches;
    // The next refresh is counted from the end of this one, so a slow answer never has a second
    // request queued behind it.
    setTimeout(refresh, 5000);
  }
}

document.getElementById("smoothing").addEventListener("input", draw);
refresh();
</script>
</body>
</html>
)html";
}

}  // namespace weft::monitor
