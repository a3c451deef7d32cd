"""The paper's Figures 3-5 and a layer x head heatmap grid, drawn with matplotlib.

Figures 3-5 of the paper show one layer's attention as lines between the
sentence written twice, queries on top and keys below, tokens written
vertically:
- Figure 3: one query token, every head in its own colour, each line's
  opacity its weight (`fig3`);
- Figure 4: top, every token's attention in one head; bottom, one token's
  attention in two heads (`fig4`);
- Figure 5: every token's attention in each of two heads (`fig5`).
Line width is proportional to the weight. Layers and heads are numbered from
1 in titles, as the paper numbers them ("layer 5 of 6").
"""

from typing import Sequence

import numpy as np

from t2tlite.visualization.weights import KIND_TITLES, KINDS, SentenceAttention

MIN_WEIGHT = 0.01  # Lines fainter than this are not drawn.


def _pyplot():
  import matplotlib
  matplotlib.use("Agg")  # Files only: no display needed.
  import matplotlib.pyplot as plt
  return plt


def head_colors(num_heads: int):
  """One colour per head (tab10 up to 10 heads, evenly spaced hues beyond)."""
  import matplotlib
  cmap = matplotlib.colormaps["tab10" if num_heads <= 10 else "hsv"]
  return [cmap(h if num_heads <= 10 else h / num_heads) for h in range(num_heads)]


def _token_rows(ax, query_tokens, key_tokens, highlight=None):
  """Queries written vertically along the top, keys along the bottom; x = token index."""
  width = max(len(query_tokens), len(key_tokens))
  for i, token in enumerate(query_tokens):
    ax.text(i, 1.02, token, rotation=90, ha="center", va="bottom", fontsize=8,
            fontweight="bold" if i == highlight else "normal",
            color="black" if highlight is None or i == highlight else "0.45")
  for j, token in enumerate(key_tokens):
    ax.text(j, -0.02, token, rotation=90, ha="center", va="top", fontsize=8)
  ax.set_xlim(-0.7, width - 0.3)
  ax.set_ylim(-0.05, 1.05)
  ax.axis("off")


def _lines(ax, weights, color, queries=None):
  """Lines query (top) -> key (bottom) for `weights` [q, k] of one head, width/opacity = weight."""
  from matplotlib.collections import LineCollection
  queries = range(weights.shape[0]) if queries is None else queries
  segments, widths, colors = [], [], []
  for i in queries:
    for j in np.flatnonzero(weights[i] >= MIN_WEIGHT):
      segments.append([(i, 1.0), (j, 0.0)])
      widths.append(0.5 + 3.0 * float(weights[i, j]))
      colors.append(color[:3] + (min(1.0, 0.15 + float(weights[i, j])),))
  ax.add_collection(LineCollection(segments, linewidths=widths, colors=colors))


def _figure(plt, panels: int, width_tokens: int):
  return plt.subplots(panels, 1, figsize=(max(6.0, 0.28 * width_tokens), 5.0 * panels),
                      squeeze=False, gridspec_kw={"hspace": 0.75})


def _title(ax, text, query_tokens):
  """A title above the vertical query tokens (about 5 points per character at size 8)."""
  ax.set_title(text, pad=12 + 5 * max(len(t) for t in query_tokens))


def _save(plt, fig, path):
  from t2tlite import files
  with files.atomic_write(path, "wb") as f:
    fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
  plt.close(fig)


def _layer_view(attention: SentenceAttention, kind: str, layer: int):
  """(query tokens, key tokens, weights [h, q, k] of `layer`, layer count, a colour per head)."""
  queries, keys = attention.tokens(kind)
  weights = attention.weights(kind)[layer]
  return queries, keys, weights, attention.weights(kind).shape[0], head_colors(weights.shape[0])


def fig3(attention: SentenceAttention, kind: str, layer: int, token: int, path: str) -> None:
  """One query token's attention in one layer (0-based `layer`), every head a colour."""
  plt = _pyplot()
  queries, keys = attention.tokens(kind)
  weights = attention.weights(kind)[layer]  # [h, q, k]
  fig, axes = _figure(plt, 1, max(len(queries), len(keys)))
  ax = axes[0, 0]
  _token_rows(ax, queries, keys, highlight=token)
  colors = head_colors(weights.shape[0])
  for head in range(weights.shape[0]):
    _lines(ax, weights[head], colors[head], queries=[token])
  handles = [plt.Line2D([], [], color=c, lw=3) for c in colors]
  ax.legend(handles, [f"head {h + 1}" for h in range(len(colors))], loc="center left",
            bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
  n = attention.weights(kind).shape[0]
  _title(ax, f"{KIND_TITLES[kind]}, layer {layer + 1} of {n}: attention of "
         f"'{queries[token]}', every head", queries)
  _save(plt, fig, path)


def fig4(attention: SentenceAttention, kind: str, layer: int, heads: Sequence[int], token: int,
         path: str) -> None:
  """Top: all of head heads[0]; bottom: `token` alone in heads[0] and heads[1] (0-based)."""
  plt = _pyplot()
  queries, keys, weights, n, colors = _layer_view(attention, kind, layer)
  fig, axes = _figure(plt, 2, max(len(queries), len(keys)))
  top, bottom = axes[0, 0], axes[1, 0]
  _token_rows(top, queries, keys)
  _lines(top, weights[heads[0]], colors[heads[0]])
  _title(top, f"{KIND_TITLES[kind]}, layer {layer + 1} of {n}: full attention of head "
         f"{heads[0] + 1}", queries)
  _token_rows(bottom, queries, keys, highlight=token)
  for head in heads[:2]:
    _lines(bottom, weights[head], colors[head], queries=[token])
  _title(bottom, f"attention of '{queries[token]}' alone, heads "
         f"{' and '.join(str(h + 1) for h in heads[:2])}", queries)
  _save(plt, fig, path)


def fig5(attention: SentenceAttention, kind: str, layer: int, heads: Sequence[int],
         path: str) -> None:
  """Every token's attention in each of two heads of one layer, one panel per head."""
  plt = _pyplot()
  queries, keys, weights, n, colors = _layer_view(attention, kind, layer)
  fig, axes = _figure(plt, len(heads[:2]), max(len(queries), len(keys)))
  for ax, head in zip(axes[:, 0], heads[:2]):
    _token_rows(ax, queries, keys)
    _lines(ax, weights[head], colors[head])
    _title(ax, f"{KIND_TITLES[kind]}, layer {layer + 1} of {n}, head {head + 1}", queries)
  _save(plt, fig, path)


def heads_grid(attention: SentenceAttention, path: str) -> None:
  """One heatmap per (kind, layer, head): rows are kinds x layers, columns heads.

  Row of a heatmap = query, column = key, darker = more weight (0 to 1).
  """
  plt = _pyplot()
  layers = attention.num_layers
  rows, cols = sum(layers.values()), attention.num_heads
  fig, axes = plt.subplots(rows, cols, figsize=(1.6 * cols + 1.2, 1.6 * rows + 0.8),
                           squeeze=False, layout="constrained")
  row = 0
  for kind in KINDS:
    for layer in range(layers[kind]):
      for head in range(cols):
        ax = axes[row, head]
        ax.imshow(attention.weights(kind)[layer, head], cmap="Blues", vmin=0.0, vmax=1.0,
                  interpolation="nearest", aspect="auto")
        ax.set_xticks([])
        ax.set_yticks([])
        if row == 0 or layer == 0:
          ax.set_title(f"head {head + 1}", fontsize=8)
        if head == 0:
          ax.set_ylabel(f"{kind.replace('encoder_decoder', 'enc-dec')}\nlayer {layer + 1}",
                        fontsize=8)
      row += 1
  fig.suptitle("attention per layer (rows) and head (columns); query down, key across")
  _save(plt, fig, path)
