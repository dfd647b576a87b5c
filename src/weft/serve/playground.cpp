#include "weft/serve/playground.h"

namespace weft::serve {

// Hooks for tests and curious users: window.lastPixels holds the 784 values the last prediction
// sent; each bar carries data-label and data-probability; #completion ends with the whole text.
const char* playground_page() {
  return R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>weft playground</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 2em; max-width: 60em; color: #222; }
  h1 { font-size: 1.4em; }
  section { margin-top: 1em; }
  canvas#canvas { border: 1px solid #888; background: #000; cursor: crosshair; touch-action: none; }
  #examples canvas { margin: 2px; border: 1px solid #ccc; cursor: pointer; }
  .bar { display: flex; align-items: center; margin: 2px 0; }
  .bar .name { width: 9em; }
  .bar .track { width: 20em; background: #eee; height: 1em; }
  .bar .fill { background: #3a7bd5; height: 1em; }
  .bar .value { width: 6em; text-align: right; font-variant-numeric: tabular-nums; }
  .bar.best .name { font-weight: bold; }
  textarea { width: 100%; height: 5em; }
  pre#completion { white-space: pre-wrap; background: #f6f6f6; padding: 0.5em; min-height: 3em; }
  #error { color: #b00; margin-top: 1em; }
</style>
</head>
<body>
<h1>weft playground</h1>
<label>Model <select id="model"></select></label> <span id="about"></span>
<section id="classifier" hidden>
  <div>Draw an item (white on black), or pick a test image:</div>
  <div id="examples"></div>
  <canvas id="canvas" width="280" height="280"></canvas>
  <div><button id="clear">Clear</button> <button id="predict">Predict</button></div>
  <div id="bars"></div>
</section>
<section id="gpt" hidden>
  <textarea id="prompt">Once upon a time</textarea>
  <div>
    <label>max tokens <input id="max_tokens" type="number" value="64" min="0" style="width: 5em"></label>
    <label>temperature <input id="temperature" type="number" value="0.8" min="0" step="0.1" style="width: 5em"></label>
    <label>top-k <input id="top_k" type="number" value="0" min="0" style="width: 5em"></label>
    <label>seed <input id="seed" type="number" value="0" min="0" style="width: 6em"></label>
    <button id="generate">Generate</button>
  </div>
  <pre id="completion"></pre>
  <div id="counts"></div>
</section>
<div id="error"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let models = [];
const canvas = $("canvas"), ctx = canvas.getContext("2d");

function showError(message) { $("error").textContent = message || ""; }

async function api(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error ? answer.error.message : "HTTP " + response.status);
  return answer;
}

function current() { return models.find((m) => m.name === $("model").value); }

function clearCanvas() {
  ctx.fillStyle = "#000";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
}

// The 28 x 28 image each canvas block of 10 x 10 pixels averages to, as integers 0..255.
function canvasPixels() {
  const data = ctx.getImageData(0, 0, 280, 280).data, pixels = [];
  for (let y = 0; y < 28; ++y)
    for (let x = 0; x < 28; ++x) {
      let sum = 0;
      for (let dy = 0; dy < 10; ++dy)
        for (let dx = 0; dx < 10; ++dx) sum += data[((y * 10 + dy) * 280 + x * 10 + dx) * 4];
      pixels.push(Math.round(sum / 100));
    }
  return pixels;
}

function drawPixels(target, pixels, scale) {
  const c = target.getContext("2d");
  for (let i = 0; i < 784; ++i) {
    const v = pixels[i];
    c.fillStyle = "rgb(" + v + "," + v + "," + v + ")";
    c.fillRect((i % 28) * scale, Math.floor(i / 28) * scale, scale, scale);
  }
}

async function showExamples(model) {
  $("examples").textContent = "";
  let examples;
  try { examples = await api("/v1/examples?model=" + encodeURIComponent(model.name)); } catch (e) { return; }
  examples.images.forEach((pixels, i) => {
    const thumb = document.createElement("canvas");
    thumb.width = thumb.height = 28;
    thumb.className = "example";
    thumb.title = model.labels[examples.labels[i]];
    drawPixels(thumb, pixels, 1);
    thumb.addEventListener("click", () => { drawPixels(canvas, pixels, 10); predict(); });
    $("examples").appendChild(thumb);
  });
}

async function predict() {
  showError();
  const model = current(), pixels = canvasPixels();
  window.lastPixels = pixels;
  try {
    const answer = await api("/v1/predict", {model: model.name, inputs: [pixels], top_k: 1});
    const p = answer.predictions[0].probabilities, best = answer.predictions[0].top_k[0].label;
    $("bars").textContent = "";
    p.forEach((probability, label) => {
      const bar = document.createElement("div");
      bar.className = "bar" + (label === best ? " best" : "");
      bar.dataset.label = label;
      bar.dataset.probability = probability;
      bar.innerHTML = '<span class="name"></span><span class="track"><div class="fill"></div></span><span class="value"></span>';
      bar.querySelector(".name").textContent = model.labels[label];
      bar.querySelector(".fill").style.width = (100 * probability).toFixed(1) + "%";
      bar.querySelector(".value").textContent = probability.toFixed(4);
      $("bars").appendChild(bar);
    });
    $("bars").dataset.done = "true";
  } catch (e) { showError(e.message); }
}

async function generate() {
  showError();
  $("completion").textContent = "";
  $("counts").textContent = "";
  delete $("completion").dataset.done;
  const request = {model: current().name, prompt: $("prompt").value, stream: true,
                   max_tokens: Number($("max_tokens").value), temperature: Number($("temperature").value),
                   top_k: Number($("top_k").value), seed: Number($("seed").value)};
  try {
    const response = await fetch("/v1/completions", {method: "POST", headers: {"Content-Type": "application/json"},
                                                     body: JSON.stringify(request)});
    if (!response.ok) {
      const answer = await response.json();
      throw new Error(answer.error ? answer.error.message : "HTTP " + response.status);
    }
    const reader = response.body.getReader(), decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = JSON.parse(buffer.slice(buffer.indexOf("data: ") + 6, end));
        buffer = buffer.slice(end + 2);
        if (event.error) throw new Error(event.error.message);
        if (event.done) {  // the whole text, decoded at once
          $("completion").textContent = event.text;
          $("counts").textContent = event.prompt_tokens + " prompt tokens, " + event.completion_tokens + " generated";
          $("completion").dataset.done = "true";
        } else {
          $("completion").textContent += event.text;
        }
      }
    }
  } catch (e) { showError(e.message); }
}

function choose() {
  const model = current();
  $("about").textContent = model.kind + ", " + (model.quantization === "none" ? model.dtype : model.quantization) +
                           ", " + model.parameters.toLocaleString() + " parameters";
  $("classifier").hidden = model.kind === "gpt";
  $("gpt").hidden = model.kind !== "gpt";
  if (model.kind !== "gpt") { clearCanvas(); $("bars").textContent = ""; showExamples(model); }
}

let drawing = false;
function stroke(event) {
  if (!drawing) return;
  const r = canvas.getBoundingClientRect();
  ctx.fillStyle = "#fff";
  ctx.beginPath();
  ctx.arc(event.clientX - r.left, event.clientY - r.top, 12, 0, 2 * Math.PI);
  ctx.fill();
}
canvas.addEventListener("pointerdown", (e) => { drawing = true; stroke(e); });
canvas.addEventListener("pointermove", stroke);
window.addEventListener("pointerup", () => { drawing = false; });
$("clear").addEventListener("click", clearCanvas);
$("predict").addEventListener("click", predict);
$("generate").addEventListener("click", generate);
$("model").addEventListener("change", choose);

api("/v1/models").then((answer) => {
  models = answer.models;
  for (const m of models) {
    const option = document.createElement("option");
    option.value = option.textContent = m.name;
    $("model").appendChild(option);
  }
  choose();
  document.body.dataset.ready = "true";
}).catch((e) => showError(e.message));
</script>
</body>
</html>
)html";
}

}  // namespace weft::serve
