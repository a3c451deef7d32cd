"""Data shard integrity: what datagen wrote, checked when read and on demand.

After a split's TFRecord shards are written, `<problem>-<split>.manifest.json`
records each shard's size, record count and SHA-256. Three checks use it:

- opening a split for training compares file sizes only (instant): a
  truncated or partly copied shard is refused before the first step;
- `t2t-datagen --verify` reads every record (TFRecord's per-record CRCs)
  and hashes every byte, naming the file and record at fault;
- rerunning `t2t-datagen` hashes the shards and regenerates a split whose
  files fail, instead of "already written, skipped".

A byte flipped after the size check (same size) still ends training with
one line: `data_loss_error` turns TensorFlow's DataLossError, which names
only an offset, into the file and record at fault.
"""

import json
import os
from typing import List, Optional

from absl import logging

from t2tlite import files
from t2tlite.errors import UserError

FORMAT = "t2tlite-shard-manifest/1"


class ShardError(UserError):
  """A data shard that is missing, damaged or not what datagen wrote; one line naming it."""


def manifest_path(data_dir: str, problem_name: str, split: str) -> str:
  return os.path.join(data_dir, f"{problem_name}-{split}.manifest.json")


def split_shards(problem, data_dir: Optional[str], split: str) -> List[str]:
  """The TFRecord files of `split` (translation problems shard; the base problem has one)."""
  if not data_dir:
    return []
  if hasattr(problem, "shard_paths"):
    return list(problem.shard_paths(data_dir, split))
  return [problem.shard_path(data_dir, split)]


_REGENERATE = "rerun t2t-datagen with the same flags to regenerate it"


def count_records(path: str) -> int:
  """Records in one TFRecord file, every CRC checked; a damaged record raises ShardError."""
  import tensorflow as tf  # Only when records are really read.
  count = 0
  try:
    for batch in tf.data.TFRecordDataset(path, buffer_size=1 << 20).batch(4096):
      count += int(batch.shape[0])
  except tf.errors.DataLossError as e:
    index = _first_bad_record(path)
    raise ShardError(f"{path}: record {index} is damaged ({_short(e)}); "
                     f"{_REGENERATE}") from None
  return count


def _first_bad_record(path: str) -> int:
  import tensorflow as tf
  index = 0
  try:
    for _ in tf.data.TFRecordDataset(path):
      index += 1
  except tf.errors.DataLossError:
    pass
  return index


def _short(error) -> str:
  return str(getattr(error, "message", error)).splitlines()[0]


def write(path: str, shards: List[str]) -> dict:
  """Reads every shard (CRCs checked) and records size, record count and SHA-256."""
  manifest = {"format": FORMAT, "shards": {
      os.path.basename(s): {"bytes": os.path.getsize(s), "records": count_records(s),
                            "sha256": files.sha256_file(s)} for s in shards}}
  with files.atomic_write(path) as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
    f.write("\n")
  return manifest


def read(path: str) -> Optional[dict]:
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      manifest = json.load(f)
    if manifest.get("format") != FORMAT:
      raise ValueError("unknown format")
    return manifest
  except ValueError as e:
    raise ShardError(f"{path}: unreadable shard manifest ({e}); "
                     f"{_REGENERATE}") from None


def problem(path: str, shards: List[str], full: bool) -> Optional[str]:
  """Why the shards do not match their manifest (None: they do). No manifest: None.

  `full=False` compares sizes; `full=True` also hashes every byte and counts
  every record (CRCs checked).
  """
  manifest = read(path)
  if manifest is None:
    return None
  for shard in shards:
    entry = manifest["shards"].get(os.path.basename(shard))
    if entry is None:
      return f"{shard}: not listed in {path}"
    if not os.path.exists(shard):
      return f"{shard}: missing"
    size = os.path.getsize(shard)
    if size != entry["bytes"]:
      return f"{shard}: {size} bytes, {os.path.basename(path)} says {entry['bytes']} (truncated or replaced)"
    if full:
      records = count_records(shard)
      if records != entry["records"]:
        return f"{shard}: {records} records, {os.path.basename(path)} says {entry['records']}"
      if files.sha256_file(shard) != entry["sha256"]:
        return f"{shard}: SHA-256 differs from {os.path.basename(path)} (bytes changed)"
  return None


def check_on_open(path: str, shards: List[str]) -> None:
  """The cheap check before reading a split: every shard has the size datagen wrote."""
  reason = problem(path, shards, full=False)
  if reason:
    raise ShardError(f"{reason}; {_REGENERATE}")


def datagen_needs_rewrite(path: str, shards: List[str]) -> Optional[str]:
  """At a datagen rerun: why a finished-looking split must be written again (None: keep it).

  Hashes every shard against its manifest. A split written before manifests
  existed gets one now, from a full read that checks every record's CRC.
  """
  if read(path) is None:
    try:
      write(path, shards)
      logging.info("%s: recorded %d shards (all records read, CRCs checked)", path, len(shards))
    except ShardError as e:
      return str(e)
    return None
  try:
    return problem(path, shards, full=True)
  except ShardError as e:
    return str(e)


def verify(path: str, shards: List[str]) -> List[str]:
  """Full check for `t2t-datagen --verify`: one "ok" line per shard, or ShardError at the first bad one."""
  manifest = read(path)
  if manifest is None:
    raise ShardError(f"{path}: no shard manifest (data written before manifests); rerun "
                     "t2t-datagen with the same flags to record one")
  reason = problem(path, shards, full=True)
  if reason:
    raise ShardError(f"{reason}; {_REGENERATE}")
  return [f"ok {s}: {manifest['shards'][os.path.basename(s)]['records']} records" for s in shards]


def data_loss_error(shards: List[str], error) -> ShardError:
  """The one-line error for a DataLossError met while reading `shards`: which file and record."""
  for shard in shards:
    try:
      count_records(shard)
    except ShardError as e:
      return e
  return ShardError(f"{', '.join(shards) or 'data'}: damaged ({_short(error)}); {_REGENERATE}")


# --- What the problems and t2t-datagen call (one line each) ---

def record_split(problem, data_dir: str, split: str) -> None:
  """After datagen wrote `split`: its manifest."""
  write(manifest_path(data_dir, problem.name, split), split_shards(problem, data_dir, split))


def stale_split(problem, data_dir: str, split: str) -> Optional[str]:
  """Before datagen skips a written split: why it must be rewritten (None: it is sound)."""
  reason = datagen_needs_rewrite(manifest_path(data_dir, problem.name, split),
                                 split_shards(problem, data_dir, split))
  if reason:
    logging.warning("%s %s fails verification (%s): writing it again", problem.name, split,
                    reason)
  return reason


def check_split_on_open(problem, data_dir: str, split: str) -> None:
  check_on_open(manifest_path(data_dir, problem.name, split),
                split_shards(problem, data_dir, split))


def verify_problem(problem, data_dir: str, splits) -> List[str]:
  """`t2t-datagen --verify`: every split present, fully; ShardError at the first bad shard."""
  lines = []
  for split in splits:
    shards = split_shards(problem, data_dir, split)
    if shards and all(os.path.exists(s) for s in shards):
      lines += verify(manifest_path(data_dir, problem.name, split), shards)
  if not lines:
    raise ShardError(f"--data_dir={data_dir}: no shards of {problem.name} to verify; run "
                     "t2t-datagen first")
  return lines
