"""Attention weights out of the model (issue 17): against a numpy recomputation of the whole
forward pass from the layers' own kernels, the sum/zero properties, the ordinary forward pass
bit for bit, the merge of pieces into words by hand, the figures' panels, the page and the
TensorBoard image."""

import html.parser
import json
import shutil
import subprocess

import numpy as np
import pytest

from t2tlite.models.transformer import Transformer
from t2tlite.visualization import figures, html_view, summary, weights as weights_lib
from tests.helpers import paper_positional_encoding, tiny_hparams

SOURCE_LENGTHS = np.array([7, 5, 2])  # EOS included; sentence 0 unpadded.
TARGET_LENGTHS = np.array([5, 3, 1])


def _batch(seed=0):
  rng = np.random.RandomState(seed)
  inputs = rng.randint(2, 20, (3, 7)).astype(np.int32)
  targets = rng.randint(2, 20, (3, 5)).astype(np.int32)
  inputs[np.arange(7)[None] >= SOURCE_LENGTHS[:, None]] = 0
  targets[np.arange(5)[None] >= TARGET_LENGTHS[:, None]] = 0
  return inputs, targets


@pytest.fixture(scope="module", params=["post", "pre"])
def model(request):
  import keras
  keras.utils.set_random_seed(3)
  return Transformer(tiny_hparams(layer_norm_position=request.param, num_encoder_layers=2,
                                  num_decoder_layers=2))


def _np(variable):
  return np.asarray(variable.numpy(), np.float64)


def numpy_transformer(model, inputs, targets):
  """The whole teacher-forced forward pass in float64 numpy from the model's variables:
  Section 3's formulas written out, the masks as -inf. -> (logits, weights per kind)."""
  hp = model.hparams
  d = hp.d_model

  def norm(layer, x):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + hp.layer_norm_epsilon) * _np(layer.gamma) + _np(layer.beta)

  def attention(layer, x, memory, allowed):
    b, t, s, h = x.shape[0], x.shape[1], memory.shape[1], hp.num_heads
    q = (x @ _np(layer.query_dense.kernel)).reshape(b, t, h, -1)
    k = (memory @ _np(layer.key_dense.kernel)).reshape(b, s, h, -1)
    v = (memory @ _np(layer.value_dense.kernel)).reshape(b, s, h, -1)
    logits = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(allowed, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    context = np.einsum("bhts,bshd->bthd", w, v).reshape(b, t, -1)
    return context @ _np(layer.output_dense.kernel), w

  def ffn(layer, x):
    inner = np.maximum(x @ _np(layer.inner.kernel) + _np(layer.inner.bias), 0.0)
    return inner @ _np(layer.outer.kernel) + _np(layer.outer.bias)

  def sublayer(x, norm_layer, f):
    if hp.layer_norm_position == "pre":
      return x + f(norm(norm_layer, x))
    return norm(norm_layer, x + f(x))

  def embed(layer, ids):
    return _np(layer.embeddings)[ids] * np.sqrt(d) + paper_positional_encoding(ids.shape[1], d)

  source_real = inputs != 0
  key_allowed = source_real[:, None, None, :]
  out = {"encoder": [], "decoder": [], "encoder_decoder": []}
  x = embed(model.source_embedding, inputs)
  for layer in model.encoder_layers:
    def self_attention(y, layer=layer):
      o, w = attention(layer.self_attention, y, y, key_allowed)
      out["encoder"].append(w)
      return o
    x = sublayer(x, layer.attention_norm, self_attention)
    x = sublayer(x, layer.ffn_norm, lambda y, layer=layer: ffn(layer.feed_forward, y))
  memory = norm(model.encoder_norm, x) if model.encoder_norm is not None else x
  shifted = np.concatenate([np.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)
  y = embed(model.target_embedding, shifted)
  t = targets.shape[1]
  causal = np.tril(np.ones((t, t), bool))[None, None]
  for layer in model.decoder_layers:
    def self_attention(z, layer=layer):
      o, w = attention(layer.self_attention, z, z, causal)
      out["decoder"].append(w)
      return o

    def cross_attention(z, layer=layer):
      o, w = attention(layer.cross_attention, z, memory, key_allowed)
      out["encoder_decoder"].append(w)
      return o
    y = sublayer(y, layer.self_norm, self_attention)
    y = sublayer(y, layer.cross_norm, cross_attention)
    y = sublayer(y, layer.ffn_norm, lambda z, layer=layer: ffn(layer.feed_forward, z))
  if model.decoder_norm is not None:
    y = norm(model.decoder_norm, y)
  logits = y @ _np(model.target_embedding.embeddings).T  # Shared softmax weights (Section 3.4).
  return logits, out


def test_weights_equal_a_numpy_recomputation_from_the_layer_kernels(model):
  assert model.hparams.shared_embedding_and_softmax_weights
  inputs, targets = _batch()
  logits, got = model.call_with_attention_weights(inputs, targets)
  want_logits, want = numpy_transformer(model, inputs, targets)
  np.testing.assert_allclose(np.asarray(logits), want_logits, atol=2e-4)
  query_real = {"encoder": inputs != 0, "decoder": targets != 0, "encoder_decoder": targets != 0}
  for kind in weights_lib.KINDS:
    per_layer = getattr(got, kind)
    assert len(per_layer) == 2
    for layer_weights, expected in zip(per_layer, want[kind]):
      layer_weights = np.asarray(layer_weights)
      assert layer_weights.dtype == np.float32 and layer_weights.shape == expected.shape
      rows = np.broadcast_to(query_real[kind][:, None, :, None], expected.shape)
      np.testing.assert_allclose(layer_weights[rows], expected[rows], atol=1e-5)


def test_rows_sum_to_one_masked_entries_and_padded_queries_are_zero(model):
  inputs, targets = _batch(1)
  _, got = model.call_with_attention_weights(inputs, targets)
  s, t = inputs.shape[1], targets.shape[1]
  source_real, target_real = inputs != 0, targets != 0
  causal = np.tril(np.ones((t, t), bool))
  cases = {"encoder": (source_real, source_real[:, None, :]),
           "decoder": (target_real, np.broadcast_to(causal, (3, t, t))),
           "encoder_decoder": (target_real, np.broadcast_to(source_real[:, None, :], (3, t, s)))}
  for kind, (query_real, allowed) in cases.items():
    for w in getattr(got, kind):
      w = np.asarray(w)  # [b, h, q, k]
      real_rows = query_real[:, None, :]  # [b, 1, q]
      sums = w.sum(-1)
      np.testing.assert_allclose(sums[np.broadcast_to(real_rows, sums.shape)], 1.0, atol=1e-5)
      assert np.all(sums[np.broadcast_to(~real_rows, sums.shape)] == 0.0)  # Zero, not uniform.
      masked = np.broadcast_to((~allowed)[:, None], w.shape)
      assert np.all(w[masked] == 0.0)
      assert np.all(w[np.broadcast_to(allowed[:, None], w.shape) &
                      np.broadcast_to(real_rows[..., None], w.shape)] > 0.0)


def test_the_weights_pass_gives_the_ordinary_forward_pass_bit_for_bit(model):
  inputs, targets = _batch(2)
  ordinary = np.asarray(model({"inputs": inputs, "targets": targets}, training=False))
  with_weights, _ = model.call_with_attention_weights(inputs, targets)
  np.testing.assert_array_equal(np.asarray(with_weights), ordinary)


def test_merging_pieces_by_hand():
  # Query pieces "▁a" "b" "<EOS>" -> words "ab" "<EOS>"; one head, one layer.
  w = np.array([[0.5, 0.25, 0.25],
                [0.1, 0.7, 0.2],
                [0.3, 0.3, 0.4]], np.float32)[None, None]
  att = weights_lib.SentenceAttention(["\u2581a", "b", "<EOS>"], ["\u2581a", "b", "<EOS>"],
                                      w, w, w)
  merged = weights_lib.merge_pieces(att)
  assert merged.source_tokens == ["ab", "<EOS>"]
  # Row "ab" = mean of rows a, b = [0.3, 0.475, 0.225]; column "ab" = its a + b entries.
  want = np.array([[0.3 + 0.475, 0.225],
                   [0.3 + 0.3, 0.4]])
  for kind in weights_lib.KINDS:
    np.testing.assert_allclose(merged.weights(kind)[0, 0], want, atol=1e-6)


def test_merging_a_longer_sentence_matches_loops_and_keeps_rows_distributions():
  pieces = ["\u2581The", "\u2581ch", "arg", "es", "\u2581were", "\u2581off", "set", "<EOS>"]
  assert weights_lib.word_groups(pieces) == [[0], [1, 2, 3], [4], [5, 6], [7]]
  assert weights_lib.word_groups(["3", "4", "<EOS>"]) == [[0], [1], [2]]  # Whole tokens.
  rng = np.random.RandomState(0)
  w = rng.rand(2, 3, 8, 8).astype(np.float32)
  w /= w.sum(-1, keepdims=True)
  groups = weights_lib.word_groups(pieces)
  got = weights_lib.merge_matrix(w, groups, groups)
  for qi, qg in enumerate(groups):
    for ki, kg in enumerate(groups):
      want = np.mean([sum(w[..., q, k] for k in kg) for q in qg], axis=0)
      np.testing.assert_allclose(got[..., qi, ki], want, atol=1e-6)
  np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
  att = weights_lib.merge_pieces(weights_lib.SentenceAttention(pieces, pieces, w, w, w))
  assert att.source_tokens == ["The", "charges", "were", "offset", "<EOS>"]


def _random_attention(layers=2, heads=3, s=5, t=4, seed=0):
  rng = np.random.RandomState(seed)

  def dist(*shape):
    w = rng.rand(*shape).astype(np.float32) ** 4
    return w / w.sum(-1, keepdims=True)
  return weights_lib.SentenceAttention(
      [f"s{i}" for i in range(s - 1)] + ["<EOS>"], [f"t{i}" for i in range(t - 1)] + ["<EOS>"],
      dist(layers, heads, s, s), dist(layers, heads, t, t), dist(layers, heads, t, s))


def test_npz_round_trips(tmp_path):
  att = _random_attention()
  att.save_npz(str(tmp_path / "a.npz"))
  back = weights_lib.SentenceAttention.load_npz(str(tmp_path / "a.npz"))
  assert back.source_tokens == att.source_tokens and back.target_tokens == att.target_tokens
  for kind in weights_lib.KINDS:
    np.testing.assert_array_equal(back.weights(kind), att.weights(kind))


def test_figures_have_the_papers_panels_and_lines(tmp_path, monkeypatch):
  from matplotlib.collections import LineCollection
  saved = []
  monkeypatch.setattr(figures, "_save", lambda plt, fig, path: saved.append(fig))
  att = _random_attention(layers=2, heads=3)
  figures.fig3(att, "encoder", 1, 2, "unused")
  figures.fig4(att, "encoder_decoder", 0, [0, 2], 1, "unused")
  figures.fig5(att, "decoder", 1, [1, 2], "unused")
  figures.heads_grid(att, "unused")
  fig3, fig4, fig5, grid = saved

  def lines(ax):
    return sum(len(c.get_segments()) for c in ax.collections if isinstance(c, LineCollection))

  w = att.encoder[1]
  assert len(fig3.axes) == 1 and lines(fig3.axes[0]) == int((w[:, 2] >= figures.MIN_WEIGHT).sum())
  cross = att.encoder_decoder[0]
  assert len(fig4.axes) == 2
  assert lines(fig4.axes[0]) == int((cross[0] >= figures.MIN_WEIGHT).sum())
  assert lines(fig4.axes[1]) == int((cross[[0, 2], 1] >= figures.MIN_WEIGHT).sum())
  assert len(fig5.axes) == 2
  assert [lines(ax) for ax in fig5.axes] == [int((att.decoder[1, h] >= figures.MIN_WEIGHT).sum())
                                             for h in (1, 2)]
  assert len(grid.axes) == 3 * 2 * 3  # Kinds x layers x heads.


class _PageParser(html.parser.HTMLParser):
  def __init__(self):
    super().__init__()
    self.tags, self.scripts, self._in_script = [], [], None

  def handle_starttag(self, tag, attrs):
    self.tags.append((tag, dict(attrs)))
    if tag == "script":
      self._in_script = dict(attrs)
      self.scripts.append([dict(attrs), ""])

  def handle_endtag(self, tag):
    if tag == "script":
      self._in_script = None

  def handle_data(self, data):
    if self._in_script is not None:
      self.scripts[-1][1] += data


def test_page_is_self_contained_and_holds_every_layer(tmp_path):
  att = _random_attention(layers=3, heads=2)
  att.source_tokens[0] = "</script><b>"  # Must stay data.
  path = str(tmp_path / "attention.html")
  html_view.write_html(att, path, title="a <title>")
  text = open(path, encoding="utf-8").read()
  parser = _PageParser()
  parser.feed(text)
  for tag, attrs in parser.tags:
    assert "src" not in attrs and "href" not in attrs, (tag, attrs)  # Nothing fetched.
    assert tag not in ("link", "iframe", "img")
  assert "@import" not in text and "url(" not in text and "fetch(" not in text
  data_scripts = [body for attrs, body in parser.scripts if attrs.get("id") == html_view.DATA_ID]
  data = json.loads(data_scripts[0])
  assert data["kinds"]["encoder"]["queries"][0] == "</script><b>"
  for kind in weights_lib.KINDS:
    got = np.array(data["kinds"][kind]["weights"])
    assert got.shape == att.weights(kind).shape  # Every layer and head.
    np.testing.assert_allclose(got, att.weights(kind), atol=5e-5)


NODE_DOM = r"""
// A minimal DOM: enough for the page's script to run under node and be counted.
function El(tag) { this.tag = tag; this.children = []; this.attrs = {}; this.style = {};
  this.textContent = ""; }
El.prototype.appendChild = function (c) { this.children.push(c); return c; };
El.prototype.setAttribute = function (k, v) { this.attrs[k] = String(v); };
El.prototype.getContext = function () { return {fillRect: function () {}}; };
Object.defineProperty(El.prototype, "innerHTML", {set: function () { this.children = []; }});
var ids = {};
global.document = {
  getElementById: function (id) {
    if (id === "attention-data") return {textContent: DATA_TEXT};
    return ids[id] || (ids[id] = new El(id));
  },
  createElement: function (t) { return new El(t); },
  createElementNS: function (ns, t) { return new El(t); }
};
function count(el, tag) {
  return el.children.reduce(function (n, c) { return n + count(c, tag); }, el.tag === tag ? 1 : 0);
}
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_page_script_runs_and_draws_the_head_view(tmp_path):
  att = _random_attention(layers=2, heads=3)
  path = str(tmp_path / "attention.html")
  html_view.write_html(att, path)
  parser = _PageParser()
  parser.feed(open(path, encoding="utf-8").read())
  data_text = next(b for a, b in parser.scripts if a.get("id") == html_view.DATA_ID)
  script = next(b for a, b in parser.scripts if not a)
  probe = (f"var DATA_TEXT = {json.dumps(data_text)};\n{NODE_DOM}\n{script}\n"
           "var svg = ids['head-view'], model = ids['model-view'];\n"
           "var lines = count(svg, 'line');\n"
           "svg.children.filter(function (c) { return c.tag === 'text'; })[0].onmouseenter();\n"
           "console.log(JSON.stringify({lines: lines, hovered: count(svg, 'line'),\n"
           "  canvases: count(model, 'canvas'), info: ids['hover-info'].textContent}));\n")
  (tmp_path / "probe.js").write_text(probe)
  proc = subprocess.run(["node", str(tmp_path / "probe.js")], capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout)
  w = att.encoder[0]  # The page opens on encoder self-attention, layer 1, every head.
  assert result["lines"] == int((w >= 0.01).sum())
  assert result["hovered"] == int((w[:, 0] >= 0.01).sum())  # Only the hovered query's lines.
  assert result["canvases"] == 2 * 3
  assert result["info"].startswith('query "s0", layer 1')


def test_tensorboard_grid_places_each_heatmap():
  rng = np.random.RandomState(0)
  w = rng.rand(2, 3, 4, 5).astype(np.float32)
  image = summary.heatmap_grid(w)
  cell = 8  # 256 // 5, at most 8.
  assert image.shape == (2 * (4 * cell + summary.GAP) - summary.GAP,
                         3 * (5 * cell + summary.GAP) - summary.GAP, 3)
  top, left = 1 * (4 * cell + summary.GAP), 2 * (5 * cell + summary.GAP)
  pixel = image[top + 3 * cell + cell // 2, left + 4 * cell + cell // 2]
  want = np.round(255 - w[1, 2, 3, 4] * (255 - np.array([8, 48, 107])))
  np.testing.assert_array_equal(pixel, want)
  assert np.all(image[4 * cell, :] == 160)  # The gap between layer rows.
