#include "weft/monitor/board_page.h"

namespace weft::monitor {

// Hooks for tests and curious users: each run's raw line (polyline.raw) and smoothed line
// (polyline.smoothed) carry data-run and data-points, the [step, value] pairs they draw (the raw
// ones exactly as the event files hold them); body gets data-ready="true" after the first drawing
// and data-refreshes counts the drawings; #skipped lists the files the server could not read.
const char* board_page() {
  return R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>weft board</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.4em; display: inline-block; margin-right: 1em; }
  #controls { display: inline-block; }
  #legend span { margin-right: 1.2em; white-space: nowrap; }
  #legend i { display: inline-block; width: 1.5em; height: 0.3em; vertical-align: middle; margin-right: 0.3em; }
  #charts { display: flex; flex-wrap: wrap; gap: 1em; }
  .chart { border: 1px solid #ddd; padding: 0.5em; }
  .chart h2 { font-size: 1em; margin: 0 0 0.3em 0; font-weight: 600; }
  .chart .hover { font-size: 0.8em; color: #444; min-height: 1.2em; font-variant-numeric: tabular-nums; }
  svg text { font-size: 10px; fill: #555; }
  polyline.raw { fill: none; stroke-width: 1; opacity: 0.35; }
  polyline.smoothed { fill: none; stroke-width: 2; }
  #skipped { color: #b00; }
  #error { color: #b00; }
</style>
</head>
<body>
<h1>weft board</h1>
<div id="controls">
  <label>Smoothing <input id="smoothing" type="range" min="0" max="0.99" step="0.01" value="0.6"></label>
  <output id="smoothing-value">0.60</output>
  <span id="status"></span>
</div>
<div id="legend"></div>
<ul id="skipped"></ul>
<div id="error"></div>
<div id="charts"></div>
<script>
"use strict";
const colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf"];
const width = 420, height = 240, padLeft = 58, padRight = 12, padTop = 10, padBottom = 34;
const svgNS = "http://www.w3.org/2000/svg";
let board = null;
let refreshes = 0;

// TensorBoard's smoothing: an exponential moving average, debiased so that the first points are
// not pulled towards zero; non-finite values pass through unsmoothed.
function smooth(values, weight) {
  let last = 0, count = 0;
  return values.map(v => {
    if (!Number.isFinite(v)) return v;
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

function label(value) {
  if (value === 0) return "0";
  const magnitude = Math.abs(value);
  return magnitude >= 1e5 || magnitude < 1e-3 ? value.toExponential(2) : String(Number(value.toPrecision(4)));
}

function ticks(lo, hi, n) {
  return Array.from({length: n + 1}, (_, i) => lo + (hi - lo) * i / n);
}

function drawChart(tag, series, weight) {
  const box = document.createElement("div");
  box.className = "chart";
  box.dataset.tag = tag;
  const title = document.createElement("h2");
  title.textContent = tag;
  box.appendChild(title);
  const all = series.flatMap(s => s.points.filter(p => Number.isFinite(p[2])));
  let [x0, x1] = [Math.min(...all.map(p => p[0])), Math.max(...all.map(p => p[0]))];
  let [y0, y1] = [Math.min(...all.map(p => p[2])), Math.max(...all.map(p => p[2]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
  const x = step => padLeft + (step - x0) / (x1 - x0) * (width - padLeft - padRight);
  const y = value => padTop + (y1 - value) / (y1 - y0) * (height - padTop - padBottom);
  const svg = el("svg", {width, height, viewBox: `0 0 ${width} ${height}`}, box);
  el("rect", {x: padLeft, y: padTop, width: width - padLeft - padRight, height: height - padTop - padBottom,
              fill: "none", stroke: "#ccc"}, svg);
  for (const v of ticks(y0, y1, 4)) {
    el("line", {x1: padLeft - 4, x2: padLeft, y1: y(v), y2: y(v), stroke: "#999"}, svg);
    el("text", {x: padLeft - 6, y: y(v) + 3, "text-anchor": "end"}, svg).textContent = label(v);
  }
  for (const s of ticks(x0, x1, 4)) {
    el("line", {x1: x(s), x2: x(s), y1: height - padBottom, y2: height - padBottom + 4, stroke: "#999"}, svg);
    el("text", {x: x(s), y: height - padBottom + 15, "text-anchor": "middle"}, svg).textContent = label(Math.round(s));
  }
  el("text", {x: (padLeft + width - padRight) / 2, y: height - 4, "text-anchor": "middle"}, svg).textContent = "step";
  for (const s of series) {
    const finite = s.points.filter(p => Number.isFinite(p[2]));
    const raw = finite.map(p => [p[0], p[2]]);
    const smoothed = smooth(raw.map(p => p[1]), weight).map((v, i) => [raw[i][0], v]);
    for (const [kind, points] of [["raw", raw], ["smoothed", smoothed]]) {
      el("polyline", {class: kind, stroke: s.colour, "data-run": s.run, "data-points": JSON.stringify(points),
                      points: points.map(p => `${x(p[0]).toFixed(2)},${y(p[1]).toFixed(2)}`).join(" ")}, svg);
    }
  }
  const hover = document.createElement("div");
  hover.className = "hover";
  box.appendChild(hover);
  const cursor = el("line", {y1: padTop, y2: height - padBottom, stroke: "#888", "stroke-dasharray": "3 3",
                             visibility: "hidden"}, svg);
  svg.addEventListener("mousemove", event => {
    const bounds = svg.getBoundingClientRect();
    const step = x0 + (event.clientX - bounds.left - padLeft) / (width - padLeft - padRight) * (x1 - x0);
    const parts = [];
    for (const s of series) {
      let nearest = null;
      for (const p of s.points) if (!nearest || Math.abs(p[0] - step) < Math.abs(nearest[0] - step)) nearest = p;
      if (nearest) parts.push(`${s.run}: step ${nearest[0]}, ${label(nearest[2])}`);
    }
    cursor.setAttribute("x1", event.clientX - bounds.left);
    cursor.setAttribute("x2", event.clientX - bounds.left);
    cursor.setAttribute("visibility", "visible");
    hover.textContent = parts.join("  |  ");
  });
  svg.addEventListener("mouseleave", () => { cursor.setAttribute("visibility", "hidden"); hover.textContent = ""; });
  return box;
}

function draw() {
  if (!board) return;
  const weight = Number(document.getElementById("smoothing").value);
  document.getElementById("smoothing-value").textContent = weight.toFixed(2);
  const colour = new Map(board.runs.map((r, i) => [r.name, colours[i % colours.length]]));
  const legend = document.getElementById("legend");
  legend.replaceChildren(...board.runs.map(r => {
    const item = document.createElement("span");
    item.dataset.run = r.name;
    const swatch = document.createElement("i");
    swatch.style.background = colour.get(r.name);
    item.append(swatch, r.name);
    return item;
  }));
  const skipped = document.getElementById("skipped");
  skipped.replaceChildren(...board.skipped.map(s => {
    const item = document.createElement("li");
    item.dataset.file = s.file;
    item.textContent = `skipped ${s.file}: ${s.reason}`;
    return item;
  }));
  const tags = [...new Set(board.runs.flatMap(r => Object.keys(r.tags)))].sort();
  const charts = tags.map(tag => drawChart(tag, board.runs.filter(r => tag in r.tags).map(
      r => ({run: r.name, colour: colour.get(r.name), points: r.tags[tag]})), weight));
  document.getElementById("charts").replaceChildren(...charts);
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
    document.getElementById("status").textContent =
        `${board.runs.length} run(s) under ${board.logdir}, read ${new Date().toLocaleTimeString()}`;
    draw();
  } catch (error) {
    document.getElementById("error").textContent = `cannot read the runs: ${error.message}`;
  }
}

document.getElementById("smoothing").addEventListener("input", draw);
refresh();
setInterval(refresh, 5000);
</script>
</body>
</html>
)html";
}

}  // namespace weft::monitor
