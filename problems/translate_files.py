"""translate_files: the user's own line-aligned parallel text, configured without code.

  t2t-datagen --problem=translate_files --data_dir=data --problem_options=\\
      "train_source=train.en,train_target=train.de,dev_source=dev.en,dev_target=dev.de,\\
       test_source=test.en,test_target=test.de,vocab_size=16000"

Files may be plain or gzipped. dev and test are optional (a split without
files is skipped; training then runs without evaluation). Once datagen has
written `data_dir`, the trainer and decoder need only `--data_dir`: the
vocabulary and shards are found there.
"""

import dataclasses
from typing import Iterator, Optional, Tuple

from t2tlite.data import parallel_text
from t2tlite.problems.problem import ProblemError
from t2tlite.problems.translate import TranslateOptions, TranslateProblem
from t2tlite.registry import register_problem


@dataclasses.dataclass(frozen=True)
class TranslateFilesOptions(TranslateOptions):
  train_source: str = ""  # Source-side training text, one sentence per line (plain or .gz).
  train_target: str = ""  # Target-side training text, aligned line by line with train_source.
  dev_source: str = ""  # Development source text (optional).
  dev_target: str = ""  # Development target text (optional).
  test_source: str = ""  # Test source text (optional).
  test_target: str = ""  # Test target text (optional).


@register_problem("translate_files")
class TranslateFiles(TranslateProblem):
  """Source -> target from files named in --problem_options."""

  Options = TranslateFilesOptions
  default_options = TranslateFilesOptions()

  def _paths(self, split: str):
    source = getattr(self.options, f"{split}_source")
    target = getattr(self.options, f"{split}_target")
    if bool(source) != bool(target):
      missing = f"{split}_target" if source else f"{split}_source"
      raise ProblemError(f"--problem_options: {missing} is not set but "
                         f"{split}_{'source' if source else 'target'} is")
    return source, target

  def has_split(self, split: str) -> bool:
    return bool(self._paths(split)[0])

  def source_target_pairs(self, split: str, tmp_dir: Optional[str]) -> Iterator[Tuple[str, str]]:
    source, target = self._paths(split)
    if not source:
      if split == "train":
        raise ProblemError("--problem_options: translate_files needs train_source and "
                           "train_target")
      return iter(())
    return parallel_text.read_parallel(source, target)

  def split_size_hint(self, split, tmp_dir):
    source, _ = self._paths(split)
    return parallel_text.count_lines(source) if source else None
