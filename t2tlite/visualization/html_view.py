"""attention.html: one self-contained page to explore a sentence's attention.

The layout follows bertviz's head view and model view, which grew out of
tensor2tensor's attention notebook and are what users know:
- head view: pick the attention kind and the layer; the query tokens stand in
  a column on the left, the key tokens on the right, one line per (query,
  key, head) whose opacity is the weight, one colour per head (click a head's
  swatch to hide or show it, double-click to show it alone); hover a token to
  see only its lines and the weights of its top keys in every shown head;
- model view: every layer (rows) x head (columns) as a small heatmap of the
  chosen kind; click one to open it in the head view.

Written natively rather than with bertviz: bertviz installs torch and
transformers, its views take torch tensors and render through IPython, and
its page loads require.js, d3 and jQuery from a CDN when it opens. This page
needs none of them: data, script and style are inlined, nothing is fetched,
and it opens offline in any browser.
"""

import html
import json

from t2tlite.visualization.weights import KIND_TITLES, KINDS, SentenceAttention

DATA_ID = "attention-data"


def page_data(attention: SentenceAttention, title: str) -> dict:
  """What the page embeds: tokens and every kind's weights [layer][head][query][key]."""
  kinds = {}
  for kind in KINDS:
    queries, keys = attention.tokens(kind)
    kinds[kind] = {"title": KIND_TITLES[kind], "queries": list(queries), "keys": list(keys),
                   "weights": attention.weights(kind).round(4).tolist()}
  return {"title": title, "kinds": kinds}


def write_html(attention: SentenceAttention, path: str, title: str = "attention") -> None:
  from t2tlite import files
  # "</" would end the <script> element early; "<\/" is the same JSON string.
  data = json.dumps(page_data(attention, title), separators=(",", ":")).replace("</", "<\\/")
  page = (_PAGE.replace("@TITLE@", html.escape(title)).replace("@STYLE@", _STYLE)
          .replace("@DATA_ID@", DATA_ID).replace("@DATA@", data).replace("@SCRIPT@", _SCRIPT))
  with files.atomic_write(path) as f:
    f.write(page)


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>@TITLE@</title>
<style>@STYLE@</style>
</head>
<body>
<h1>@TITLE@</h1>
<div class="controls">
  <label>Attention <select id="kind"></select></label>
  <label>Layer <select id="layer"></select></label>
  <span id="heads" title="click: show/hide a head; double-click: that head alone"></span>
</div>
<div class="views">
  <div><h2>Head view</h2><svg id="head-view"></svg></div>
  <div><h2>Weights</h2><div id="hover-info">Hover a token.</div></div>
</div>
<h2>Model view <small>(layers down, heads across; click one to open it above)</small></h2>
<div id="model-view"></div>
<script type="application/json" id="@DATA_ID@">@DATA@</script>
<script>@SCRIPT@</script>
</body>
</html>
"""

_STYLE = """
body { font-family: sans-serif; margin: 1em 2em; color: #222; }
h1 { font-size: 1.2em; } h2 { font-size: 1em; margin: 0.8em 0 0.3em; }
.controls label { margin-right: 1.2em; }
.swatch { display: inline-block; width: 1.3em; height: 1.3em; margin: 0 2px;
          vertical-align: middle; cursor: pointer; border: 2px solid #fff; font-size: 0.7em;
          text-align: center; color: #fff; line-height: 1.3em; }
.swatch.off { opacity: 0.2; }
.views { display: flex; gap: 2em; align-items: flex-start; }
#hover-info { font-family: monospace; font-size: 0.85em; white-space: pre; min-width: 18em; }
svg text { font-size: 13px; cursor: default; }
svg text.active { font-weight: bold; }
#model-view { display: grid; gap: 4px; }
#model-view canvas { border: 1px solid #ccc; cursor: pointer; image-rendering: pixelated; }
#model-view .label { font-size: 0.75em; align-self: center; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("attention-data").textContent);
  var KINDS = Object.keys(DATA.kinds);
  var ROW = 20, TEXT_W = 120, GAP = 240, TOP = 10;
  var state = {kind: KINDS[0], layer: 0, shown: [], hover: null};
  var kindSelect = document.getElementById("kind");
  var layerSelect = document.getElementById("layer");
  var svg = document.getElementById("head-view");
  var SVG_NS = "http://www.w3.org/2000/svg";  // A namespace name, not a fetch.

  function current() { return DATA.kinds[state.kind]; }
  function numHeads() { return current().weights[0].length; }
  function headColor(h, n) {
    return "hsl(" + Math.round(360 * h / Math.max(n, 1)) + ", 70%, 45%)";
  }
  function option(select, value, text) {
    var o = document.createElement("option");
    o.value = value; o.textContent = text; select.appendChild(o);
  }

  function fillLayers() {
    layerSelect.innerHTML = "";
    var layers = current().weights.length;
    for (var l = 0; l < layers; l++) option(layerSelect, l, (l + 1) + " of " + layers);
    state.layer = Math.min(state.layer, layers - 1);
    layerSelect.value = state.layer;
  }

  function fillHeads() {
    var box = document.getElementById("heads");
    box.innerHTML = "Heads ";
    var n = numHeads();
    if (state.shown.length !== n) {
      state.shown = [];
      for (var h = 0; h < n; h++) state.shown.push(true);
    }
    state.shown.forEach(function (on, h) {
      var s = document.createElement("span");
      s.className = "swatch" + (on ? "" : " off");
      s.style.background = headColor(h, n);
      s.textContent = h + 1;
      s.onclick = function () { state.shown[h] = !state.shown[h]; fillHeads(); drawHeadView(); };
      s.ondblclick = function () {
        state.shown = state.shown.map(function (_, i) { return i === h; });
        fillHeads(); drawHeadView();
      };
      box.appendChild(s);
    });
  }

  function svgElement(name, attrs, parent) {
    var e = document.createElementNS(SVG_NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    parent.appendChild(e);
    return e;
  }

  function drawHeadView() {
    var kind = current(), weights = kind.weights[state.layer];
    var n = weights.length, q = kind.queries.length, k = kind.keys.length;
    svg.innerHTML = "";
    svg.setAttribute("width", 2 * TEXT_W + GAP);
    svg.setAttribute("height", TOP + ROW * Math.max(q, k) + 10);
    var lines = svgElement("g", {}, svg);
    for (var h = 0; h < n; h++) {
      if (!state.shown[h]) continue;
      for (var i = 0; i < q; i++) {
        if (state.hover && state.hover.side === "query" && state.hover.index !== i) continue;
        for (var j = 0; j < k; j++) {
          if (state.hover && state.hover.side === "key" && state.hover.index !== j) continue;
          var w = weights[h][i][j];
          if (w < 0.01) continue;
          svgElement("line", {x1: TEXT_W, y1: TOP + ROW * i + ROW / 2,
                              x2: TEXT_W + GAP, y2: TOP + ROW * j + ROW / 2,
                              stroke: headColor(h, n), "stroke-opacity": w,
                              "stroke-width": 1 + 3 * w}, lines);
        }
      }
    }
    function tokens(list, side, x, anchor) {
      list.forEach(function (token, index) {
        var t = svgElement("text", {x: x, y: TOP + ROW * index + ROW * 0.7,
                                    "text-anchor": anchor}, svg);
        t.textContent = token;
        if (state.hover && state.hover.side === side && state.hover.index === index) {
          t.setAttribute("class", "active");
        }
        t.onmouseenter = function () {
          state.hover = {side: side, index: index}; drawHeadView(); showWeights();
        };
        t.onmouseleave = function () { state.hover = null; drawHeadView(); };
      });
    }
    tokens(kind.queries, "query", TEXT_W - 6, "end");
    tokens(kind.keys, "key", TEXT_W + GAP + 6, "start");
  }

  function showWeights() {
    var kind = current(), weights = kind.weights[state.layer], hover = state.hover;
    var info = document.getElementById("hover-info");
    if (!hover) return;
    var out = [];
    var name = hover.side === "query" ? kind.queries[hover.index] : kind.keys[hover.index];
    out.push((hover.side === "query" ? "query " : "key ") + JSON.stringify(name) + ", layer " +
             (state.layer + 1));
    weights.forEach(function (head, h) {
      if (!state.shown[h]) return;
      var row = hover.side === "query" ? head[hover.index].slice()
                                       : head.map(function (r) { return r[hover.index]; });
      var other = hover.side === "query" ? kind.keys : kind.queries;
      var order = row.map(function (_, i) { return i; })
                     .sort(function (a, b) { return row[b] - row[a]; }).slice(0, 5);
      out.push("head " + (h + 1) + ": " + order.map(function (i) {
        return other[i] + " " + row[i].toFixed(3);
      }).join(", "));
    });
    info.textContent = out.join("\n");
  }

  function drawModelView() {
    var box = document.getElementById("model-view"), kind = current();
    var layers = kind.weights.length, n = numHeads();
    box.innerHTML = "";
    box.style.gridTemplateColumns = "auto repeat(" + n + ", auto)";
    var q = kind.queries.length, k = kind.keys.length;
    var cell = Math.max(1, Math.min(6, Math.floor(120 / Math.max(q, k))));
    for (var l = 0; l < layers; l++) {
      var label = document.createElement("div");
      label.className = "label"; label.textContent = "layer " + (l + 1);
      box.appendChild(label);
      for (var h = 0; h < n; h++) {
        var c = document.createElement("canvas");
        c.width = k * cell; c.height = q * cell;
        c.title = "layer " + (l + 1) + ", head " + (h + 1);
        var ctx = c.getContext("2d");
        for (var i = 0; i < q; i++) {
          for (var j = 0; j < k; j++) {
            var w = kind.weights[l][h][i][j];
            ctx.fillStyle = "rgba(8, 48, 107, " + w + ")";
            ctx.fillRect(j * cell, i * cell, cell, cell);
          }
        }
        c.onclick = (function (layer, head) {
          return function () {
            state.layer = layer; layerSelect.value = layer;
            state.shown = state.shown.map(function (_, i) { return i === head; });
            fillHeads(); drawHeadView();
          };
        })(l, h);
        box.appendChild(c);
      }
    }
  }

  KINDS.forEach(function (kind) { option(kindSelect, kind, DATA.kinds[kind].title); });
  kindSelect.onchange = function () {
    state.kind = kindSelect.value; state.hover = null;
    fillLayers(); fillHeads(); drawHeadView(); drawModelView();
  };
  layerSelect.onchange = function () { state.layer = +layerSelect.value; drawHeadView(); };
  fillLayers(); fillHeads(); drawHeadView(); drawModelView();
})();
"""
