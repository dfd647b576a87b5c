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
  [hidden] { display: none !important; }
  body { font-family: system-ui, sans-serif; margin: 0; color: #222; background: #f4f5f7; }
  main { max-width: 62em; margin: 0 auto; padding: 1.5em 2em; }
  header { display: flex; flex-wrap: wrap; align-items: center; gap: 0.5em 1em; margin-bottom: 1em; }
  h1 { font-size: 1.4em; margin: 0 1em 0 0; }
  h2 { font-size: 1em; margin: 0 0 0.6em 0; font-weight: 600; }
  #about { color: #666; font-size: 0.9em; }
  .panel { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 1em 1.2em; }
  .columns { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
  .columns > .panel { flex: 1 1 22em; }
  label { font-size: 0.9em; color: #444; }
  select, input, textarea, button { font: inherit; font-size: 0.95em; }
  select, input, textarea { border: 1px solid #bbb; border-radius: 4px; padding: 0.3em 0.45em; background: #fff; }
  select:focus, input:focus, textarea:focus, button:focus-visible { outline: 2px solid #3a7bd5; outline-offset: 1px; }
  button { border: 1px solid #bbb; border-radius: 4px; padding: 0.35em 1em; background: #fff; cursor: pointer; }
  button:hover { background: #f0f0f0; }
  button.primary { background: #3a7bd5; border-color: #3a7bd5; color: #fff; }
  button.primary:hover { background: #2f67b5; }
  button:disabled { opacity: 0.6; cursor: default; }
  .hint { color: #666; font-size: 0.9em; margin: 0 0 0.6em 0; }
  canvas#canvas { display: block; border-radius: 4px; background: #000; cursor: crosshair; touch-action: none; }
  .buttons { display: flex; gap: 0.5em; margin-top: 0.6em; }
  #examples { display: flex; flex-wrap: wrap; gap: 4px; margin-top: 0.4em; }
  #examples canvas { width: 42px; height: 42px; image-rendering: pixelated; border: 1px solid #ccc; border-radius: 3px;
                     cursor: pointer; }
  #examples canvas:hover { border-color: #3a7bd5; }
  .bar { display: flex; align-items: center; gap: 0.5em; margin: 3px 0; }
  .bar .name { width: 7em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  .bar .track { flex: 1; background: #eee; height: 1em; border-radius: 2px; overflow: hidden; }
  .bar .fill { background: #3a7bd5; height: 1em; }
  .bar .value { width: 4.5em; text-align: right; font-variant-numeric: tabular-nums; }
  .bar.best .name, .bar.best .value { font-weight: bold; }
  .bar.best .fill { background: #1f5fb0; }
  /* Before any answer, say where it will appear rather than leave a blank. */
  #bars:empty::before { content: "No prediction yet: pick a test image, or draw and press Predict."; }
  #completion:empty::before {
    content: "No completion yet: write a prompt and press Generate; the tokens appear here as they arrive."; }
  #bars:empty::before, #completion:empty::before { color: #888; font-style: italic; font-family: system-ui; }
  .field { display: flex; flex-direction: column; gap: 0.2em; }
  #prompt { width: 100%; box-sizing: border-box; height: 5em; resize: vertical; }
  .settings { display: flex; flex-wrap: wrap; align-items: flex-end; gap: 0.8em; margin-top: 0.8em; }
  .settings input { width: 6em; }
  pre#completion { white-space: pre-wrap; background: #f8f8f8; border: 1px solid #e4e4e4; border-radius: 4px;
                   padding: 0.6em; min-height: 4em; margin: 0; }
  #counts { color: #666; font-size: 0.9em; margin-top: 0.4em; min-height: 1.2em; }
  #error { color: #b00; margin-top: 1em; }
  #error:not(:empty) { background: #fdecec; border: 1px solid #f3b6b6; border-radius: 4px; padding: 0.6em 0.8em; }
</style>
</head>
<body>
<main>
<header>
  <h1>weft playground</h1>
  <label for="model">Model</label> <select id="model"></select>
  <span id="about"></span>
</header>
<section id="classifier" class="columns" hidden>
  <div class="panel">
    <h2>Draw</h2>
    <p class="hint">White on black, as the data set's images are.</p>
    <canvas id="canvas" width="280" height="280" aria-label="drawing canvas"></canvas>
    <div class="buttons"><button id="clear">Clear</button> <button id="predict" class="primary">Predict</button></div>
    <h2 style="margin-top: 1em">Test images</h2>
    <p class="hint">Click one to predict it.</p>
    <div id="examples"></div>
  </div>
  <div class="panel">
    <h2>Probabilities</h2>
    <div id="bars"></div>
  </div>
</section>
<section id="gpt" class="panel" hidden>
  <div class="field">
    <label for="prompt">Prompt</label>
    <textarea id="prompt">Once upon a time</textarea>
  </div>
  <div class="settings">
    <div class="field"><label for="max_tokens">Max tokens</label>
      <input id="max_tokens" type="number" value="64" min="0"></div>
    <div class="field"><label for="temperature">Temperature</label>
      <input id="temperature" type="number" value="0.8" min="0" step="0.1"></div>
    <div class="field"><label for="top_k">Top-k (0: all)</label>
      <input id="top_k" type="number" value="0" min="0"></div>
    <div class="field"><label for="seed">Seed</label>
      <input id="seed" type="number" value="0" min="0"></div>
    <button id="generate" class="primary">Generate</button>
  </div>
  <h2 style="margin-top: 1em">Completion</h2>
  <pre id="completion"></pre>
  <div id="counts"></div>
</section>
<div id="error"></div>
</main>
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
  $("generate").disabled = true;
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
  } catch (e) { showError(e.message); } finally { $("generate").disabled = false; }
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
$("clear").addEventListener("click", () => { clearCanvas(); $("bars").textContent = ""; });
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
