"""The shapes of a decode, apart from any backend: which sentences share a batch, how wide.

The Decoder (TensorFlow, decoder.py) and the JAX search (jax_search.py) both
cut sources into these batches (`plan`), pad them to these widths, let the cached
step attend within these horizons and read the rows back (`nbest_rows`), so a decode
compiles the same shapes and returns the same beams on either backend; a
benchmark feeding another system the very batches t2t-decoder forms uses
`length_batches` too.
"""

from typing import List, NamedTuple, Sequence, Set, Tuple

import numpy as np

from t2tlite.constants import EOS_ID, PAD_ID, until_eos


def max_input_length(decode_hparams, model_hparams) -> int:
  """Longest source, in tokens without EOS; 0 means no limit.

  decode_hparams.max_input_length, else the model's max_length (EOS included there).
  """
  limit = decode_hparams.max_input_length or model_hparams.max_length
  return max(limit - 1, 1) if limit else 0


def cut_sources(sources: Sequence[Sequence[int]], limit: int) -> Tuple[List[List[int]], int]:
  """(sources as lists, each cut to `limit` tokens when limit > 0; how many were cut)."""
  sources = [list(s) for s in sources]
  if not limit:
    return sources, 0
  return [s[:limit] for s in sources], sum(1 for s in sources if len(s) > limit)


class PlannedBatch(NamedTuple):
  """One batch of a decode, as `plan` settles it before any search runs."""
  chosen: List[int]  # Indices of the sources in this batch, row by row.
  inputs: np.ndarray  # int32 [rows, width], EOS-terminated, PAD-padded.
  lengths: np.ndarray  # int32 [rows], source lengths without EOS (0 in padding rows).
  new_shape: bool  # No earlier batch (of this call or before) had this shape.


def plan(sources: Sequence[Sequence[int]], hp, shapes_seen: Set[Tuple[int, int]]
         ) -> List[PlannedBatch]:
  """The padded batches of `sources` (already cut to the input limit), in batch order.

  `shapes_seen` (the shapes compiled so far) is read and extended. Extra rows hold an
  empty source (EOS only, max length 0): done after one step, yet computed at every step.
  They pay only by reusing a compiled shape: one compiled already, or one a later batch of
  this call may reuse. A call's last batch pads onto a compiled shape only (parsing: 17
  sentences in 64 x 21 rows cost as much as 64). Shapes are settled before any search runs,
  so that concurrent searches pad exactly as one after the other would.
  """
  batches = length_batches([len(s) for s in sources], hp)
  planned = []
  for index, chosen in enumerate(batches):
    width = padded_width(max(len(sources[i]) for i in chosen) + 1, hp.length_multiple)
    rows = len(chosen)
    padded_rows = max(len(chosen), hp.rows_for_width(width))
    if hp.pad_batch_rows and (index < len(batches) - 1
                              or (padded_rows, width) in shapes_seen):
      rows = padded_rows
    batch = np.full([rows, width], PAD_ID, np.int32)
    batch[len(chosen):, 0] = EOS_ID
    lengths = np.zeros([rows], np.int32)
    for row, i in enumerate(chosen):
      batch[row, :len(sources[i])] = sources[i]
      batch[row, len(sources[i])] = EOS_ID
      lengths[row] = len(sources[i])
    new_shape = batch.shape not in shapes_seen
    shapes_seen.add(batch.shape)
    planned.append(PlannedBatch(chosen, batch, lengths, new_shape))
  return planned


def nbest_rows(ids: np.ndarray, scores: np.ndarray, rows: int, beams_written: int
               ) -> List[List[Tuple[List[int], float]]]:
  """A search's ids [b, beam, length] and scores [b, beam] -> per row of the first `rows`, the
  best `beams_written` (ids without EOS, score), best first."""
  return [[(until_eos(ids[row, k]), float(scores[row, k]))
           for k in range(min(beams_written, ids.shape[1]))] for row in range(rows)]


def length_batches(lengths: Sequence[int], hp) -> List[List[int]]:
  """Indices of non-empty sources, sorted by length, cut under hp's sentence and token budgets.

  `hp` is a DecodeHParams (batch_size, batch_tokens, length_multiple).
  """
  order = sorted((i for i, n in enumerate(lengths) if n), key=lambda i: lengths[i])
  out, current = [], []
  for i in order:
    width = padded_width(lengths[i] + 1, hp.length_multiple)  # Longest so far: sorted.
    over_budget = hp.batch_tokens and (len(current) + 1) * width > hp.batch_tokens
    if current and (len(current) == hp.batch_size or over_budget):
      out.append(current)
      current = []
    current.append(i)
  return out + ([current] if current else [])


def padded_width(length: int, multiple: int) -> int:
  """`length` rounded up to a multiple of `multiple` (a source batch's compiled width)."""
  return -(-length // multiple) * multiple


def doubling_horizons(length: int, first: int = 64) -> List[int]:
  """[first, 2 * first, 4 * first, ..., length]: the horizons of a search over `length` positions.

  Doubling keeps the attended width within 2x the prefix while compiling only
  log2(length / first) + 1 self-attentions per decoder layer (DecoderLayer.call_cached);
  one when length <= first.
  """
  horizons = []
  horizon = max(1, first)
  while horizon < length:
    horizons.append(horizon)
    horizon *= 2
  return horizons + [length]
