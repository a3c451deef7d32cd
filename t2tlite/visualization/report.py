"""What t2t-attention writes into --out: the figures, the page and the raw weights.

`choose_view` turns the user's --kind/--layer/--token/--heads into indices
(checked, with one-line errors) and picks defaults the paper's figures
suggest; `write_report` writes the six files.
"""

import dataclasses
import os
from typing import List, Optional

from t2tlite.errors import UserError
from t2tlite.visualization import figures, html_view
from t2tlite.visualization.weights import (KINDS, WORD_START, SentenceAttention,
                                           farthest_reaching_query, most_focused_heads)

OUTPUT_FILES = ("fig3.png", "fig4.png", "fig5.png", "heads.png", "attention.html",
                "attention.npz")


class AttentionViewError(UserError):
  """A --kind, --layer, --token or --heads that the sentence or the model does not have."""


@dataclasses.dataclass(frozen=True)
class View:
  """What Figures 3-5 show, 0-based: one kind, one layer, one query token, two heads."""
  kind: str
  layer: int
  token: int
  heads: List[int]


def existing_outputs(out_dir: str) -> List[str]:
  return [name for name in OUTPUT_FILES if os.path.exists(os.path.join(out_dir, name))]


def check_against_model(hparams, kind: str, layer: int, heads: str) -> None:
  """--layer and --heads against the run's hparams, before any model is built."""
  layers = {"encoder": hparams.num_encoder_layers, "decoder": hparams.num_decoder_layers,
            "encoder_decoder": hparams.num_decoder_layers}.get(kind)
  if layers is not None and not 0 <= layer <= layers:
    raise AttentionViewError(f"--layer={layer}: the model has {layers} layers (1 to {layers}; "
                             "0: the default)")
  _head_indices(heads, hparams.num_heads)


def _head_indices(heads: str, num_heads: int) -> List[int]:
  """"5,6" -> [4, 5], checked; "" -> []."""
  if not heads:
    return []
  try:
    chosen = [int(h) for h in heads.split(",")]
  except ValueError:
    raise AttentionViewError(f"--heads={heads}: one or two head numbers, e.g. 5,6") from None
  if not 1 <= len(chosen) <= 2 or any(not 1 <= h <= num_heads for h in chosen):
    raise AttentionViewError(f"--heads={heads}: one or two heads from 1 to {num_heads}")
  return [h - 1 for h in chosen]


def choose_view(attention: SentenceAttention, kind: str = "encoder", layer: int = 0,
                token: str = "", heads: str = "") -> View:
  """The user's choices (layers, heads and positions counted from 1; 0 or "" = default).

  Defaults: the second-to-last layer (the paper's "layer 5 of 6"), the query
  token that puts the most weight farthest away (Figure 3's long-distance
  dependency), and the two heads with the sharpest attention in that layer.
  --token is a position (from 1) or a token's text (its first occurrence; a
  word finds the piece that starts it, "making" finds "▁making").
  """
  if kind not in KINDS:
    raise AttentionViewError(f"--kind={kind}: one of {', '.join(KINDS)}")
  weights = attention.weights(kind)
  num_layers, num_heads = weights.shape[0], weights.shape[1]
  if not 0 <= layer <= num_layers:
    raise AttentionViewError(f"--layer={layer}: the model has {num_layers} layers (1 to "
                             f"{num_layers}; 0: the default)")
  layer_index = layer - 1 if layer else max(num_layers - 2, 0)
  queries = attention.tokens(kind)[0]
  token_index = _token_index(token, queries, weights[layer_index])
  head_indices = (_head_indices(heads, num_heads) or
                  most_focused_heads(weights[layer_index], min(2, num_heads)))
  if len(head_indices) == 1 and num_heads > 1:  # Figures 4 and 5 show two heads.
    head_indices.append(next(h for h in range(num_heads) if h != head_indices[0]))
  return View(kind, layer_index, token_index, head_indices)


def _token_index(token: str, queries, layer_weights) -> int:
  if not token:
    return farthest_reaching_query(layer_weights, queries)
  if token.isdigit():
    position = int(token)
    if not 1 <= position <= len(queries):
      raise AttentionViewError(f"--token={token}: positions run from 1 to {len(queries)}")
    return position - 1
  for candidate in (token, WORD_START + token):  # "making" finds the piece "▁making".
    if candidate in queries:
      return queries.index(candidate)
  raise AttentionViewError(f"--token={token}: not a token of the sentence "
                           f"({' '.join(queries[:40])})")


def write_report(attention: SentenceAttention, view: View, out_dir: str,
                 title: Optional[str] = None) -> List[str]:
  """Writes OUTPUT_FILES into `out_dir` (created); returns their paths."""
  os.makedirs(out_dir, exist_ok=True)
  paths = {name: os.path.join(out_dir, name) for name in OUTPUT_FILES}
  figures.fig3(attention, view.kind, view.layer, view.token, paths["fig3.png"])
  figures.fig4(attention, view.kind, view.layer, view.heads, view.token, paths["fig4.png"])
  figures.fig5(attention, view.kind, view.layer, view.heads, paths["fig5.png"])
  figures.heads_grid(attention, paths["heads.png"])
  html_view.write_html(attention, paths["attention.html"],
                       title or " ".join(attention.source_tokens))
  attention.save_npz(paths["attention.npz"])
  return list(paths.values())
