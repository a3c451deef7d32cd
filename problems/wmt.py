"""WMT 2014 English-German and English-French, as the paper trains and tests them.

Data come from tensorflow-datasets' `wmt14_translate` (configs `de-en`, `fr-en`),
downloaded and prepared under `--tmp_dir` on first use: train = its train split
(about 4.5M pairs for en-de; europarl, commoncrawl, news commentary and, for
en-fr, UN and Gigaword French-English), dev = newstest2013, test = newstest2014
(the full 3003-line version the paper and tensor2tensor report on).

Vocabulary (Section 5.1): en-de shares about 37000 BPE tokens between source
and target; en-fr uses 32000 word pieces. sentencepiece has no WordPiece
trainer; its unigram model is the nearest likelihood-driven segmentation, so
en-fr uses it (set `--problem_options=vocab_type=bpe` to compare).
"""

from typing import Iterator, Optional, Tuple

from t2tlite.problems.problem import ProblemError
from t2tlite.problems.translate import TranslateOptions, TranslateProblem
from t2tlite.registry import PROBLEMS, register_problem

_TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


class Wmt14Problem(TranslateProblem):
  """English -> `other_lang` from tfds wmt14_translate/`other_lang`-en."""

  other_lang = "de"
  default_options = TranslateOptions(vocab_size=37000, vocab_type="bpe",
                                     vocab_sample_size=2_000_000, num_train_shards=16)

  @property
  def tfds_name(self) -> str:
    return f"wmt14_translate/{self.other_lang}-en"

  def source_target_pairs(self, split: str, tmp_dir: Optional[str]) -> Iterator[Tuple[str, str]]:
    import tensorflow_datasets as tfds  # Slow to import; only datagen needs it.

    try:
      data = tfds.load(self.tfds_name, split=_TFDS_SPLITS[split], data_dir=tmp_dir,
                       download=True)
    except Exception as e:  # tfds raises many types; the user needs the one line.
      raise ProblemError(f"{self.tfds_name} ({split}) could not be loaded into "
                         f"--tmp_dir={tmp_dir}: {str(e).splitlines()[0]}") from None
    for example in tfds.as_numpy(data):
      yield example["en"].decode("utf-8"), example[self.other_lang].decode("utf-8")

  def split_size_hint(self, split, tmp_dir):
    try:
      import tensorflow_datasets as tfds
      return tfds.builder(self.tfds_name, data_dir=tmp_dir).info.splits[
          _TFDS_SPLITS[split]].num_examples or None
    except Exception:  # Only for the progress ETA.
      return None


@register_problem("wmt_ende")
class WmtEnDe(Wmt14Problem):
  """WMT14 English -> German, 37000 shared BPE tokens (the paper's Table 2 EN-DE)."""
  other_lang = "de"


@register_problem("wmt_enfr")
class WmtEnFr(Wmt14Problem):
  """WMT14 English -> French, 32000 word pieces (the paper's Table 2 EN-FR)."""
  other_lang = "fr"
  default_options = TranslateOptions(vocab_size=32000, vocab_type="unigram",
                                     vocab_sample_size=2_000_000, num_train_shards=64)


@register_problem("wmt_deen")
class WmtDeEn(WmtEnDe):
  """German -> English on the same data and vocabulary as wmt_ende."""
  reverse, vocab_name = True, "wmt_ende"


@register_problem("wmt_fren")
class WmtFrEn(WmtEnFr):
  """French -> English on the same data and vocabulary as wmt_enfr."""
  reverse, vocab_name = True, "wmt_enfr"


# tensor2tensor's names for these tasks (its vocabularies are 2**15 or 2**13 subwords of its own
# SubwordTextEncoder; ours are the paper's sizes unless --problem_options says otherwise). Give a
# different size its own --data_dir: the vocabulary files are named after the problem.
PROBLEMS.alias("translate_ende_wmt32k", "wmt_ende",
               "tensor2tensor's name; t2t uses 32768 subwords, this problem the paper's 37000 "
               "BPE tokens (--problem_options=vocab_size=32768 for t2t's size)")
PROBLEMS.alias("translate_ende_wmt8k", "wmt_ende",
               "tensor2tensor's 8192-subword EN-DE; this problem has 37000 BPE tokens unless "
               "--problem_options=vocab_size=8192")
PROBLEMS.alias("translate_enfr_wmt32k", "wmt_enfr",
               "tensor2tensor's name; t2t uses 32768 subwords, this problem the paper's 32000 "
               "word pieces")
