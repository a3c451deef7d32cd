"""The shapes of a decode, apart from any backend: which sentences share a batch, how wide.

The Decoder (TensorFlow, decoder.py) and the JAX search (jax_search.py) both
cut sources into these batches, pad them to these widths and run the search
in these horizons, so a decode compiles the same shapes and returns the same
beams on either backend; a benchmark feeding another system the very batches
t2t-decoder forms uses `length_batches` too.
"""

from typing import List, Sequence


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
  log2(length / first) + 1 loops; one loop when length <= first.
  """
  horizons = []
  horizon = max(1, first)
  while horizon < length:
    horizons.append(horizon)
    horizon *= 2
  return horizons + [length]
