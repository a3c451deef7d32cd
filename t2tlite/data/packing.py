"""Packing several (source, target) pairs into one row, as tensor2tensor's `packed` problems.

A bucketed batch pads every pair to its bucket's boundary; a packed batch
instead lays short pairs end to end in rows of a fixed length L, so nearly
every position holds a real token. Each row carries, per side (tensor2tensor's
feature names, `generator_utils.pack_examples`):

  inputs, targets                 int32 [rows, L]: the pairs' ids, 0 after the last pair
  inputs_segmentation, ...        int32 [rows, L]: 1, 2, ... for the row's 1st, 2nd, ...
  targets_segmentation               pair (the same k on both sides), 0 at padding
  inputs_position,                int32 [rows, L]: position within the pair, restarting
  targets_position                   at 0 with each pair (0 at padding)

which the model turns into attention masks that never cross a pair and into
per-pair position encodings (t2tlite/models/transformer.py), so a pair's loss
and gradients are those it would have alone in a row.

Rows are filled first-fit decreasing: the pairs of a window, longest first
(source + target tokens), each go into the first row opened so far with room
for them on both sides, else open a new one. tensor2tensor packs at datagen
with greedy first-fit in arrival order over a window of open rows
(`_pack_with_custom_ops`), once, so its rows never change; here the trainer
packs each window of its shuffled stream as it trains
(`input_pipeline.training_dataset`, which then shuffles the rows), so every
epoch packs differently and the problems' records stay the unpacked ones.
Longest first fills rows better: on Multi30k (8000 BPE, rows of 64 tokens)
arrival order left 4.8% of target positions empty, longest first 2.4%
(bench/padding_efficiency.py). Numpy only: no TensorFlow import.

Both sides share the row length, as in tensor2tensor, so the shorter side of
a language pair cannot fill its rows: its efficiency is at most its tokens
over the longer side's (0.97 for Multi30k en-de, 0.90 for newstest2013).
"""

from typing import Dict, List, Sequence

import numpy as np

from t2tlite.constants import PAD_ID

FEATURES = ("inputs", "targets", "inputs_segmentation", "targets_segmentation",
            "inputs_position", "targets_position")


def first_fit(source_lengths: Sequence[int], target_lengths: Sequence[int],
              length: int) -> List[List[int]]:
  """Pair indices per row, first-fit decreasing.

  Pairs in order of decreasing source + target length (ties in the order
  given) each go into the first open row where both sides fit. Every side
  must be <= `length` (the caller drops longer pairs). Rows are listed in the
  order they were opened, each row's pairs in the order they were placed.
  """
  source_lengths = np.asarray(source_lengths, np.int64)
  target_lengths = np.asarray(target_lengths, np.int64)
  n = len(source_lengths)
  source_room = np.full(n, length, np.int64)  # At most one row per pair.
  target_room = np.full(n, length, np.int64)
  rows: List[List[int]] = []
  for i in np.argsort(-(source_lengths + target_lengths), kind="stable"):
    i = int(i)
    s, t = source_lengths[i], target_lengths[i]
    if s > length or t > length:
      raise ValueError(f"pair {i} has sides of {s} and {t} tokens, longer than the row "
                       f"length {length}")
    open_rows = len(rows)
    fits = np.flatnonzero((source_room[:open_rows] >= s) & (target_room[:open_rows] >= t))
    row = int(fits[0]) if fits.size else open_rows
    if row == open_rows:
      rows.append([])
    rows[row].append(i)
    source_room[row] -= s
    target_room[row] -= t
  return rows


def pack(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
         length: int) -> Dict[str, np.ndarray]:
  """Pairs (ids with EOS, no padding) -> packed rows, every FEATURES array int32 [rows, L]."""
  rows = first_fit([len(s) for s in sources], [len(t) for t in targets], length)
  out = {key: np.full((len(rows), length), PAD_ID if key in ("inputs", "targets") else 0,
                      np.int32) for key in FEATURES}
  for r, members in enumerate(rows):
    for side, sequences in (("inputs", sources), ("targets", targets)):
      at = 0
      for segment, i in enumerate(members, start=1):
        ids = sequences[i]
        out[side][r, at:at + len(ids)] = ids
        out[f"{side}_segmentation"][r, at:at + len(ids)] = segment
        out[f"{side}_position"][r, at:at + len(ids)] = np.arange(len(ids))
        at += len(ids)
  return out


def pack_padded(inputs: np.ndarray, targets: np.ndarray, length: int) -> List[np.ndarray]:
  """A padded batch of pairs [n, >= their lengths] -> packed rows, FEATURES order.

  Pairs are read back by their non-pad tokens (ids are never PAD_ID inside a
  sequence); all-pad rows (none in a training stream) are skipped.
  """
  source_lengths = np.count_nonzero(inputs != PAD_ID, axis=1)
  target_lengths = np.count_nonzero(targets != PAD_ID, axis=1)
  keep = (source_lengths > 0) | (target_lengths > 0)
  sources = [row[:n] for row, n, k in zip(inputs, source_lengths, keep) if k]
  target_ids = [row[:n] for row, n, k in zip(targets, target_lengths, keep) if k]
  packed = pack(sources, target_ids, length)
  return [packed[key] for key in FEATURES]

