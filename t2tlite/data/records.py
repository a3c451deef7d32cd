"""The TFRecord files of a problem's splits: one record format, one writer, one reader.

Every problem writes its splits through `SplitWriter` and reads them back with
`read_records`, so the record format (a `tf.train.Example` of int64 id lists
keyed "inputs" / "targets", each ending in EOS), the kill-safety (every file
of a split lands together, through `t2tlite.files.atomic_paths`) and the
split statistics exist once.
"""

import json
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from t2tlite import files
from t2tlite.constants import EOS_ID

FEATURES = {"inputs": tf.io.VarLenFeature(tf.int64), "targets": tf.io.VarLenFeature(tf.int64)}


def serialize_example(ids: Dict[str, Sequence[int]]) -> bytes:
  """One record: a tf.train.Example of int64 id lists, keyed "inputs" / "targets"."""
  feature = {key: tf.train.Feature(int64_list=tf.train.Int64List(value=value))
             for key, value in ids.items()}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def serialize_pair(source_ids: Sequence[int], target_ids: Sequence[int]) -> bytes:
  """The record of one pair from its ids without EOS: both sides get their EOS here."""
  return serialize_example({"inputs": list(source_ids) + [EOS_ID],
                            "targets": list(target_ids) + [EOS_ID]})


# Without AutoGraph, which tf.data would run on each trace: no tensor control flow here.
@tf.autograph.experimental.do_not_convert
def parse_example(record) -> Dict[str, tf.Tensor]:
  """A serialized record -> {"inputs": int32 [s], "targets": int32 [t]}."""
  parsed = tf.io.parse_single_example(record, FEATURES)
  return {key: tf.cast(tf.sparse.to_dense(value), tf.int32) for key, value in parsed.items()}


def read_records(paths: Sequence[str]) -> tf.data.Dataset:
  """The examples of a split's shards, in file order (shards interleaved when several)."""
  paths = list(paths)
  if len(paths) == 1:
    return tf.data.TFRecordDataset(paths[0]).map(parse_example)
  return tf.data.TFRecordDataset(paths, num_parallel_reads=min(len(paths), 4)).map(
      parse_example, num_parallel_calls=tf.data.AUTOTUNE)


def in_memory_dataset(pairs) -> tf.data.Dataset:
  """Examples from a list of id dicts, stored as one flat array per side (fast to build)."""
  columns = {}
  for key in ("inputs", "targets"):
    lengths = np.array([len(p[key]) for p in pairs], np.int64)
    ends = np.cumsum(lengths)
    columns[key] = (tf.constant(np.concatenate([p[key] for p in pairs])), ends - lengths, ends)
  bounds = {key: (starts, ends) for key, (_, starts, ends) in columns.items()}
  return tf.data.Dataset.from_tensor_slices(bounds).map(tf.autograph.experimental.do_not_convert(
      lambda b: {key: columns[key][0][b[key][0]:b[key][1]] for key in b}))


class SplitWriter:
  """Writes one split: TFRecord shards (pairs dealt round robin), raw text, optional stats.

    with SplitWriter(shard_paths, text_paths, stats_path) as writer:
      for ...: writer.write(source, target, source_ids, target_ids)

  Every file is written under a temporary name and all are renamed together
  when the block ends without an error, so a killed or failed run leaves
  nothing a later run would trust. `text_paths` (none, or the inputs and
  targets files) receive the raw lines; `stats_path` receives what was written
  (pairs, tokens, the length histogram the trainer's max_length note reads).
  """

  def __init__(self, shard_paths: Sequence[str], text_paths: Sequence[str] = (),
               stats_path: Optional[str] = None):
    self.shard_paths, self.text_paths = list(shard_paths), list(text_paths)
    self.stats_path = stats_path
    self.count = 0
    self.tokens = [0, 0]
    self.histogram: Dict[int, int] = {}
    self.pairs_read: Optional[int] = None  # Set by the caller for the stats file, if known.
    self.dropped_empty_side: Optional[int] = None

  def __enter__(self) -> "SplitWriter":
    paths = self.shard_paths + self.text_paths + ([self.stats_path] if self.stats_path else [])
    self._atomic = files.atomic_paths(paths)
    tmps = self._atomic.__enter__()
    n = len(self.shard_paths)
    self._stats_tmp = tmps[-1] if self.stats_path else None
    try:
      self._writers = [tf.io.TFRecordWriter(p) for p in tmps[:n]]
      self._texts = [open(p, "w", encoding="utf-8") for p in tmps[n:n + len(self.text_paths)]]
    except BaseException as e:
      self._atomic.__exit__(type(e), e, e.__traceback__)
      raise
    return self

  def write(self, source: str, target: str, source_ids: Sequence[int],
            target_ids: Sequence[int]) -> None:
    """One pair: its ids (without EOS) as a record, its lines into the text files."""
    self._writers[self.count % len(self._writers)].write(serialize_pair(source_ids, target_ids))
    length = max(len(source_ids), len(target_ids)) + 1  # + EOS.
    self.histogram[length] = self.histogram.get(length, 0) + 1
    self.tokens[0] += len(source_ids) + 1
    self.tokens[1] += len(target_ids) + 1
    for f, line in zip(self._texts, (source, target)):
      f.write(line + "\n")
    self.count += 1

  def stats(self) -> dict:
    out = {"pairs_read": self.pairs_read} if self.pairs_read is not None else {}
    out["pairs_written"] = self.count
    if self.dropped_empty_side is not None:
      out["dropped_empty_side"] = self.dropped_empty_side
    return dict(out, source_tokens=self.tokens[0], target_tokens=self.tokens[1],
                shards=len(self.shard_paths),
                length_histogram={str(k): self.histogram[k] for k in sorted(self.histogram)})

  def __exit__(self, exc_type, exc, tb):
    try:
      for w in self._writers:
        w.close()
      for f in self._texts:
        f.close()
      if exc_type is None and self._stats_tmp:
        with open(self._stats_tmp, "w") as f:
          json.dump(self.stats(), f, indent=1)
    except BaseException as e:  # A failed close or stats write: nothing lands.
      self._atomic.__exit__(type(e), e, e.__traceback__)
      raise
    return self._atomic.__exit__(exc_type, exc, tb)

