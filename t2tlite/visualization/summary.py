"""Attention in TensorBoard: the layer x head heatmap grid of one fixed dev sentence.

At each evaluation the trainer (with --attention_summaries, the default)
runs `call_with_attention_weights` on the first dev sentence and its
reference (teacher forced: one forward pass of one sentence, no decoding)
and writes one image per attention kind, `attention/encoder`,
`attention/decoder` and `attention/encoder_decoder`, plus the sentence's
pieces as `attention/sentence` text. The grid is built in numpy (no
matplotlib figure per evaluation): layers down, heads across, each heatmap
query down, key across, white = 0 to dark blue = 1, so a user watches the
heads form as training goes.
"""

from typing import Optional

import numpy as np

from t2tlite.visualization import weights as weights_lib

MAX_TOKENS = 48  # Longer dev sentences are cut (pieces, before EOS): the image stays small.
GAP = 2  # Pixels between heatmaps.
_DARK = np.array([8, 48, 107], np.float32)  # The darkest blue of matplotlib's "Blues".
_GAP_VALUE = 160


def heatmap_grid(weights: np.ndarray) -> np.ndarray:
  """[layers, heads, q, k] in [0, 1] -> uint8 RGB image [height, width, 3].

  Each weight is a square of `cell` pixels (cell = 256 // longest side,
  between 1 and 8); heatmaps are GAP pixels apart on a grey background.
  """
  layers, heads, q, k = weights.shape
  cell = int(np.clip(256 // max(q, k), 1, 8))
  tile_h, tile_w = q * cell, k * cell
  image = np.full((layers * (tile_h + GAP) - GAP, heads * (tile_w + GAP) - GAP, 3), _GAP_VALUE,
                  np.uint8)
  for layer in range(layers):
    for head in range(heads):
      w = np.clip(weights[layer, head], 0.0, 1.0)
      tile = 255.0 - w[..., None] * (255.0 - _DARK)  # [q, k, 3]
      tile = np.repeat(np.repeat(tile, cell, axis=0), cell, axis=1)
      top, left = layer * (tile_h + GAP), head * (tile_w + GAP)
      image[top:top + tile_h, left:left + tile_w] = np.round(tile).astype(np.uint8)
  return image


def fixed_dev_sentence(problem, data_dir: Optional[str]):
  """(source ids, target ids, source pieces, target pieces) of the first non-empty dev pair.

  None when there is none, or no text to show: batches saved as numpy
  (numpy_batches.SavedBatches) stand in for a problem with ids only.
  """
  if not hasattr(problem, "encoders"):
    return None
  encoders = problem.encoders(data_dir)
  sources, targets = problem.eval_text("dev", data_dir)
  for source, target in zip(sources, targets):
    if source.strip() and target.strip():
      source_ids = encoders["inputs"].encode(source)[:MAX_TOKENS]
      target_ids = encoders["targets"].encode(target)[:MAX_TOKENS]
      return (source_ids, target_ids, weights_lib.piece_strings(encoders["inputs"], source_ids),
              weights_lib.piece_strings(encoders["targets"], target_ids))
  return None


def write_attention_summaries(writer, step: int, model, sentence) -> None:
  """Writes attention/<kind> images and attention/sentence text for `sentence` at `step`."""
  import tensorflow as tf
  attention = weights_lib.sentence_attention(model, *sentence)
  with writer.as_default(step=step):
    for kind in weights_lib.KINDS:
      tf.summary.image(f"attention/{kind}", heatmap_grid(attention.weights(kind))[None],
                       description=f"{weights_lib.KIND_TITLES[kind]}: layers down, heads "
                       "across; each heatmap query down, key across")
    tf.summary.text("attention/sentence",
                    f"source: {' '.join(attention.source_tokens)}\n\n"
                    f"target: {' '.join(attention.target_tokens)}")
  writer.flush()
