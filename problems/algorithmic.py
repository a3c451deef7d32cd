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
    rng = np.random.default_rng([seed, ("train", "dev", "test").index(split)])
    names = [str(s) for s in range(self.num_symbols)]
    seen = set()
    count = 0
    while count < self.split_sizes[split]:
      length = int(rng.integers(self.min_length, self.max_length + 1))
      symbols = [names[s] for s in rng.integers(0, self.num_symbols, size=length).tolist()]
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
