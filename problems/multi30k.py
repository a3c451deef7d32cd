"""Multi30k task 1 (image-caption translation): English -> German and English -> French.

The raw, untokenized, cased files of the Multi30k repository
(`data/task1/raw/{train,val,test_2016_flickr}.{en,de,fr}.gz`: 29000 / 1014 /
1000 lines) are read from `--tmp_dir`; any that are missing are downloaded
there first from the repository. dev = val, test = test_2016_flickr, the
splits torchtext and most papers use. Vocabulary: 8000 shared BPE pieces.
"""

import os
import urllib.request
from typing import Iterator, Optional, Tuple

from absl import logging

from t2tlite import files
from t2tlite.data import parallel_text
from t2tlite.problems.problem import ProblemError
from t2tlite.problems.translate import TranslateOptions, TranslateProblem
from t2tlite.registry import register_problem

_FILES = {"train": "train", "dev": "val", "test": "test_2016_flickr"}
_SIZES = {"train": 29000, "dev": 1014, "test": 1000}


class Multi30kProblem(TranslateProblem):
  """English -> `target_lang` on Multi30k task 1."""

  default_options = TranslateOptions(vocab_size=8000, vocab_type="bpe")
  target_lang = "de"
  # Where missing files come from (a class attribute, so a mirror can be set).
  base_url = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"

  def file_path(self, tmp_dir: str, split: str, lang: str) -> str:
    """The raw file of `split` in `lang` under tmp_dir, downloaded if absent."""
    name = f"{_FILES[split]}.{lang}.gz"
    path = os.path.join(tmp_dir, name)
    if not os.path.exists(path):
      os.makedirs(tmp_dir, exist_ok=True)
      url = self.base_url + name
      logging.info("downloading %s -> %s", url, path)
      try:
        with files.atomic_paths([path]) as (tmp,):
          urllib.request.urlretrieve(url, tmp)
      except OSError as e:
        raise ProblemError(f"{path}: missing, and downloading {url} failed ({e}); put "
                           f"the Multi30k file there by hand") from None
    return path

  def source_target_pairs(self, split: str, tmp_dir: Optional[str]) -> Iterator[Tuple[str, str]]:
    if not tmp_dir:
      raise ProblemError(f"problem {self.name} needs --tmp_dir (where the Multi30k files "
                         "are, or are downloaded to)")
    source = self.file_path(tmp_dir, split, "en")
    target = self.file_path(tmp_dir, split, self.target_lang)
    return parallel_text.read_parallel(source, target)

  def split_size_hint(self, split, tmp_dir):
    return _SIZES[split]


@register_problem("multi30k_ende")
class Multi30kEnDe(Multi30kProblem):
  """Multi30k English -> German."""
  target_lang = "de"


@register_problem("multi30k_enfr")
class Multi30kEnFr(Multi30kProblem):
  """Multi30k English -> French."""
  target_lang = "fr"
