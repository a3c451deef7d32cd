"""The Problem interface: text pairs, their encoders, and the tf.data input.

A problem answers three questions: which (source, target) text pairs make
each split, how text becomes ids (its encoders), and how it is scored. From
that the base class derives the rest: `generate_data` writes tokenized
TFRecord shards (what `t2t-datagen` runs), and `dataset` reads them back, or,
for problems that generate their data (`generated = True`), encodes the pairs
in memory so no datagen step is needed.
"""

import os
from typing import Callable, Dict, Iterator, Optional, Tuple

import numpy as np
import tensorflow as tf

from t2tlite.data import records, shard_manifest, text_encoder
from t2tlite.errors import UserError
from t2tlite.progress import Progress

SPLITS = ("train", "dev", "test")


class ProblemError(UserError):
  """Bad data or a missing file; one line naming the file at fault."""


class Problem:
  """Base class of registered problems (see problems/algorithmic.py)."""

  generated = False  # True: pairs come from code, no download and no datagen needed.
  default_decode_hparams = ""  # "key=value,..." applied under --decode_hparams.
  eval_metrics = ("bleu",)  # What t2t-decoder reports against references.

  @property
  def name(self) -> str:
    return getattr(type(self), "registered_name", type(self).__name__)

  # --- To implement ---
  def text_pairs(self, split: str, tmp_dir: Optional[str] = None) -> Iterator[Tuple[str, str]]:
    """Yields (source, target) lines of `split` ("train", "dev" or "test")."""
    raise NotImplementedError

  def encoders(self, data_dir: Optional[str] = None) -> Dict[str, text_encoder.TextEncoder]:
    """{"inputs": encoder, "targets": encoder}; may read a vocabulary from data_dir."""
    raise NotImplementedError

  # --- Optional ---
  def configure(self, options: str, flag: str = "--problem_options") -> None:
    """Applies "key=value,..." options; problems without options accept none."""
    if options and options.strip():
      raise ProblemError(f"{flag}: problem {self.name} takes no options")

  def has_data(self, split: str, data_dir: Optional[str]) -> bool:
    """Whether `dataset(split, data_dir)` has examples to give (e.g. a dev set to evaluate)."""
    return True

  def count_longer_than(self, data_dir: Optional[str], split: str,
                        max_length: int) -> Optional[int]:
    """Examples of `split` longer than max_length (None: not known without a pass)."""
    return None

  def eval_text(self, split: str, data_dir: Optional[str]):
    """(source lines, target lines) of a dev/test split, as t2t-decoder reads them."""
    pairs = list(self.text_pairs(split, None))
    return [s for s, _ in pairs], [t for _, t in pairs]

  def decode_postprocessor(self, decode_hparams) -> Optional[Callable[[str, str], str]]:
    """None, or `f(source line, decoded text) -> output line` for every decoded hypothesis.

    Parsing turns the decoded token sequence back into a tree over the source
    words (problems/parsing.py). A returned object with a `summary()` method
    has it logged after decoding.
    """
    return None

  def decode_constraint(self, decode_hparams, encoders):
    """None, or a token constraint for the search (`t2tlite.decoding.search`).

    Parsing returns a `TreeConstraint` when `decode_hparams.constrain_trees`
    is set, so every hypothesis is a tree over the source words.
    """
    return None

  # --- Derived ---
  def vocab_sizes(self, data_dir: Optional[str] = None) -> Tuple[int, int]:
    enc = self.encoders(data_dir)
    return enc["inputs"].vocab_size, enc["targets"].vocab_size

  def encode_pair(self, source: str, target: str, encoders) -> Dict[str, np.ndarray]:
    """Ids of both sides, each ending in EOS."""
    return {
        "inputs": np.array(encoders["inputs"].encode(source) + [text_encoder.EOS_ID], np.int32),
        "targets": np.array(encoders["targets"].encode(target) + [text_encoder.EOS_ID], np.int32),
    }

  def shard_path(self, data_dir: str, split: str) -> str:
    return os.path.join(data_dir, f"{self.name}-{split}.tfrecord")

  def text_path(self, data_dir: str, split: str, side: str) -> str:
    """Plain-text copy of a dev/test side ("inputs" or "targets"), for t2t-decoder."""
    return os.path.join(data_dir, f"{self.name}-{split}.{side}")

  def generate_data(self, data_dir: str, tmp_dir: Optional[str] = None) -> None:
    """Writes a TFRecord file per split, and the dev/test text beside it.

    Finished files are kept, not rewritten. Each file is written under a
    temporary name and renamed when complete, so a killed run never leaves a
    file that a later run would trust.
    """
    os.makedirs(data_dir, exist_ok=True)
    encoders = self.encoders(data_dir)
    for split in SPLITS:
      path = self.shard_path(data_dir, split)
      texts = ([self.text_path(data_dir, split, side) for side in ("inputs", "targets")]
               if split != "train" else [])
      if all(os.path.exists(p) for p in [path] + texts) and not shard_manifest.stale_split(
          self, data_dir, split):
        continue
      progress = Progress(f"{self.name} {split}", self.split_size(split), "pairs")
      with records.SplitWriter([path], texts) as writer:
        for source, target in self.text_pairs(split, tmp_dir):
          writer.write(source, target, encoders["inputs"].encode(source),
                       encoders["targets"].encode(target))
          progress.update(writer.count)
      shard_manifest.record_split(self, data_dir, split)
      progress.finish(writer.count)

  def split_size(self, split: str) -> Optional[int]:
    """Pairs `split` will hold when known before writing it (the progress line's total)."""
    return getattr(self, "split_sizes", {}).get(split)

  def dataset(self, split: str, data_dir: Optional[str] = None) -> tf.data.Dataset:
    """Examples {"inputs": int32 [s], "targets": int32 [t]}, EOS-terminated."""
    path = self.shard_path(data_dir, split) if data_dir else None
    if path and os.path.exists(path):
      shard_manifest.check_split_on_open(self, data_dir, split)  # Sizes: cheap.
      return records.read_records([path])
    if not self.generated:
      raise ProblemError(f"{path or '--data_dir'}: no data for problem {self.name} split "
                         f"{split}; run t2t-datagen --problem={self.name} --data_dir=DIR first")
    encoders = self.encoders(data_dir)
    pairs = [self.encode_pair(s, t, encoders) for s, t in self.text_pairs(split)]
    return records.in_memory_dataset(pairs)

