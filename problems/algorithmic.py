"""Generated problems: copy and reverse sequences of digits (no download).

A source is 1 to 20 symbols drawn uniformly from `0`..`9`, space separated
("3 1 4 1 5"); the target is the same sequence (copy) or reversed ("5 1 4 1 3").
Generation is deterministic from the problem's seed. Splits are disjoint by
construction: a sequence belongs to the split chosen by a hash of its text, so
no test sequence can ever appear in training, however many are drawn.

Options (`--problem_options`): `seed` draws every split anew; `test_seed` draws
only the test split anew, so a trained model can be scored on sequences it was
never developed on: `t2t-datagen --problem=algorithmic_reverse
--problem_options=test_seed=2 --data_dir=fresh` writes fresh test files (the
hash still keeps them out of training).
"""

import dataclasses

import hashlib
from typing import Iterator, List, Optional, Tuple

import numpy as np

from t2tlite import overrides
from t2tlite.data.text_encoder import TokenEncoder
from t2tlite.problems.problem import Problem
from t2tlite.registry import register_problem

# Hash buckets (out of 10) owned by each split: 80% of all sequences are train.
_SPLIT_BUCKETS = {"dev": (0,), "test": (1,), "train": tuple(range(2, 10))}
_SPLIT_OF_BUCKET = [next(split for split, owned in _SPLIT_BUCKETS.items() if bucket in owned)
                    for bucket in range(10)]


def split_of(sequence: str) -> str:
  """The split a sequence belongs to, from a stable hash of its text (SHA-1 as a number)."""
  return _SPLIT_OF_BUCKET[int.from_bytes(hashlib.sha1(sequence.encode()).digest(), "big") % 10]


class LemireDraws:
  """numpy's `Generator.integers(0, n, size)` draws from a fresh PCG64 generator, in bulk.

  A split of 100,000 pairs asks `integers` 250,000 times, ~4 us a call (most of a
  trainer's 4 s start on this problem). numpy draws an integer below n from the bit
  generator's 32-bit stream (each 64-bit output's low half, then its high half) by
  Lemire's method: (u * n) >> 32, drawing u again while the low 32 bits of u * n fall
  under 2**32 % n. This does the same arithmetic on a whole chunk of the stream at
  once (`random_raw`) for each n asked, and walks it in Python, so the draws are the
  ones `integers` gives call by call (tests/test_problems.py compares them over
  several seeds) and depend only on PCG64's stream.
  """

  CHUNK = 1 << 18  # 64-bit outputs read at a time: 2**19 values.

  def __init__(self, rng: np.random.Generator):
    self._bits = rng.bit_generator
    self._stream = np.empty(0, np.uint64)  # 32-bit values read (as uint64); [_next:] not drawn.
    self._next = 0
    self._scaled = {}  # n -> (each value scaled below n, prefix counts of the rejected), lists.

  def below(self, n: int, count: int) -> List[int]:
    """`count` integers in [0, n), as `rng.integers(0, n, size=count).tolist()` draws them.

    n from 1 to 2**32 - 1 (the 32-bit method's range); n = 1 draws nothing, as numpy.
    """
    if n == 1:
      return [0] * count
    self._read_if_short(count)
    values, rejected = self._scaled.get(n) or self._scale(n)
    first = self._next
    if rejected[first + count] == rejected[first]:  # No redraw among them: the common case.
      self._next = first + count
      return values[first:first + count]
    out = []
    while len(out) < count:  # A redraw (about once in 2**28 values): one value at a time.
      self._read_if_short(1)
      values, rejected = self._scaled.get(n) or self._scale(n)
      at = self._next
      self._next = at + 1
      if rejected[at + 1] == rejected[at]:
        out.append(values[at])
    return out

  def _scale(self, n):
    m = self._stream * np.uint64(n)
    low_too_small = (m & np.uint64(0xFFFFFFFF)) < np.uint64((1 << 32) % n)
    rejected = np.concatenate([[0], np.cumsum(low_too_small)])
    self._scaled[n] = ((m >> np.uint64(32)).tolist(), rejected.tolist())
    return self._scaled[n]

  def _read_if_short(self, count):
    if self._next + count <= len(self._stream):
      return
    raw = self._bits.random_raw(max(self.CHUNK, count))
    halves = np.empty(2 * len(raw), np.uint64)
    halves[0::2], halves[1::2] = raw & np.uint64(0xFFFFFFFF), raw >> np.uint64(32)
    self._stream = np.concatenate([self._stream[self._next:], halves])
    self._next = 0
    self._scaled = {}


@dataclasses.dataclass(frozen=True)
class AlgorithmicOptions:
  seed: int = 1  # Seeds the draw of every split.
  test_seed: int = 0  # Seeds the test split's draw instead, when not 0 (a fresh test set).


class AlgorithmicProblem(Problem):
  """Sequences of `num_symbols` digits mapped by `transform`."""

  generated = True
  eval_metrics = ("exact_match", "bleu")
  num_symbols = 10
  min_length = 1
  max_length = 20
  split_sizes = {"train": 100000, "dev": 1000, "test": 1000}

  def __init__(self):
    self.options = AlgorithmicOptions()

  def configure(self, options: str, flag: str = "--problem_options") -> None:
    """Applies "seed=N,test_seed=M" (see the module docstring)."""
    self.options = overrides.apply_overrides(self.options, options, flag)

  def transform(self, symbols: List[str]) -> List[str]:
    raise NotImplementedError

  def encoders(self, data_dir: Optional[str] = None):
    encoder = TokenEncoder([str(i) for i in range(self.num_symbols)])
    return {"inputs": encoder, "targets": encoder}

  def text_pairs(self, split: str, tmp_dir: Optional[str] = None) -> Iterator[Tuple[str, str]]:
    """Deterministic pairs of `split`; dev and test hold distinct sequences."""
    seed = self.options.test_seed if split == "test" and self.options.test_seed else self.options.seed
    draws = LemireDraws(np.random.default_rng([seed, ("train", "dev", "test").index(split)]))
    names = [str(s) for s in range(self.num_symbols)]
    seen = set()
    count = 0
    while count < self.split_sizes[split]:
      length = self.min_length + draws.below(self.max_length - self.min_length + 1, 1)[0]
      symbols = [names[s] for s in draws.below(self.num_symbols, length)]
      source = " ".join(symbols)
      if split_of(source) != split or (split != "train" and source in seen):
        continue
      seen.add(source)
      count += 1
      yield source, " ".join(self.transform(symbols))


@register_problem("algorithmic_reverse")
class AlgorithmicReverse(AlgorithmicProblem):
  """Target = the source symbols in reverse order."""

  def transform(self, symbols):
    return symbols[::-1]


@register_problem("algorithmic_copy")
class AlgorithmicCopy(AlgorithmicProblem):
  """Target = the source symbols unchanged."""

  def transform(self, symbols):
    return list(symbols)
