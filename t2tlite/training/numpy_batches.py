"""Training batches as plain numpy arrays, for a trainer on a machine without TensorFlow.

The GPU machines have JAX but not TensorFlow, so neither tf.data nor the
problems' TFRecords work there. `write` runs the trainer's own data module
(input_pipeline.py: token-budget batches in length buckets, shuffled with
the run's seed) on a machine that has TensorFlow and saves what it yields:

  DIR/train-00000.npz, ...  the first `steps` global training batches, in
                            order (keys inputs_<i>, targets_<i>, and for packed
                            rows the segment and position features; CHUNK per file)
  DIR/dev.npz               every dev batch (padded to static shapes)
  DIR/batches.json          the problem, its data identity (vocabulary file and
                            SHA-256, sizes), the batching hparams and seed the
                            batches were cut with, and each file's SHA-256

`SavedBatches(DIR)` reads them back with numpy alone and stands in for the
problem in the trainer (`t2t-trainer --numpy_batches=DIR`): same name, same
vocabulary sizes, same data identity (so t2t-decoder later checks the run
against the real --data_dir as for any run). The trainer checks that its
hparams batch as these were batched. A batch is the one the TensorFlow-fed
trainer would draw at that step with the same seed. Past the last saved one
the stream starts over (logged) in a new order each pass, as an input
pipeline reshuffles each epoch, though from the same batches: save as many
as the run will take.
"""

import json
import os
from typing import Dict, Iterator, Optional

import numpy as np
from absl import logging

from t2tlite import files
from t2tlite.data.packing import FEATURES  # inputs, targets, and the packed rows' segments.
from t2tlite.hparams_record import HParams
from t2tlite.errors import UserError

MANIFEST = "batches.json"
FORMAT = "t2tlite-numpy-batches/1"
CHUNK = 500  # Batches per train-*.npz.
# The hparams that decide how examples become batches: they must match the trainer's.
BATCHING = ("batch_size", "accumulate_steps", "max_length", "min_length_bucket",
            "length_bucket_step", "shuffle_buffer_size", "input_vocab_size", "target_vocab_size",
            "packed_batches", "packed_length")
FLAG = "--numpy_batches"


class NumpyBatchesError(UserError):
  """Saved batches that are missing, damaged, or cut for other hparams; one line."""


def _save_npz(path: str, arrays: Dict[str, np.ndarray]) -> dict:
  with files.atomic_write(path, "wb") as f:
    np.savez(f, **arrays)
  return {"bytes": os.path.getsize(path), "sha256": files.sha256_file(path)}


def write(problem, data_dir: Optional[str], hparams, out_dir: str, steps: int, seed: int,
          replicas: int = 1, progress=None) -> str:
  """Saves `steps` training batches and every dev batch of `problem` under `out_dir`.

  `hparams` must carry the problem's vocabulary sizes (as the trainer sets
  them); `replicas` is the device count of the machine that will train.
  Returns the manifest's path.
  """
  from t2tlite.training import input_pipeline, run_identity
  if os.path.exists(os.path.join(out_dir, MANIFEST)):
    raise NumpyBatchesError(f"{FLAG}={out_dir} already holds saved batches; choose a new "
                            "directory (nothing is overwritten)")
  os.makedirs(out_dir, exist_ok=True)
  import tensorflow as tf
  tf.random.set_seed(seed)  # As the trainer's keras.utils.set_random_seed: the same shuffle.
  train = input_pipeline.training_dataset(problem.dataset("train", data_dir), hparams, seed=seed,
                                          replicas=replicas)
  entries, chunk, shapes = {}, {}, set()
  for i, batch in enumerate(train.take(steps).as_numpy_iterator()):
    chunk.update({f"{key}_{i}": value for key, value in batch.items()})
    shapes.add(batch["targets"].shape)
    if len(chunk) == len(batch) * CHUNK or i == steps - 1:
      name = f"train-{len(entries):05d}.npz"
      entries[name] = _save_npz(os.path.join(out_dir, name), chunk)
      chunk = {}
    if progress:
      progress.update(i + 1)
  dev_batches = 0
  if problem.has_data("dev", data_dir):
    dev = {}
    data = input_pipeline.evaluation_dataset(problem.dataset("dev", data_dir), hparams,
                                             replicas=replicas)
    for i, batch in enumerate(data.as_numpy_iterator()):
      dev.update({f"{key}_{i}": value for key, value in batch.items()})
      dev_batches += 1
    entries["dev.npz"] = _save_npz(os.path.join(out_dir, "dev.npz"), dev)
  manifest = {
      "format": FORMAT, "problem": problem.name,
      "data": run_identity.data_identity(problem, data_dir),
      "eval_metrics": list(problem.eval_metrics),
      "hparams": {k: getattr(hparams, k) for k in BATCHING},
      "random_seed": seed, "replicas": replicas, "train_batches": steps,
      "dev_batches": dev_batches, "chunk": CHUNK, "bucket_shapes": len(shapes),
      "num_buckets": input_pipeline.num_buckets(problem.dataset("train", data_dir), hparams),
      "dropped_long_pairs": problem.count_longer_than(data_dir, "train", hparams.max_length),
      "files": entries,
  }
  path = os.path.join(out_dir, MANIFEST)
  with files.atomic_write(path) as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
    f.write("\n")
  return path


class SavedBatches:
  """Batches saved by `write`, read with numpy; stands in for the problem in the trainer."""

  generated = False

  def __init__(self, directory: str):
    self.directory = directory
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
      raise NumpyBatchesError(f"{FLAG}={directory}: no {MANIFEST}; write the batches with "
                              "t2t-datagen --numpy_batches=DIR on a machine with TensorFlow")
    try:
      with open(path) as f:
        self.manifest = json.load(f)
      if self.manifest.get("format") != FORMAT:
        raise ValueError(f"format {self.manifest.get('format')!r}, expected {FORMAT}")
    except ValueError as e:
      raise NumpyBatchesError(f"{path}: unreadable ({e})") from None
    for name, entry in self.manifest["files"].items():  # Sizes only: cheap, catches truncation.
      file_path = os.path.join(directory, name)
      if not os.path.isfile(file_path) or os.path.getsize(file_path) != entry["bytes"]:
        raise NumpyBatchesError(f"{file_path}: missing or not the {entry['bytes']} bytes "
                                f"{MANIFEST} records")
    self.name = self.manifest["problem"]
    self.eval_metrics = tuple(self.manifest["eval_metrics"])
    self._chunk_cache = (None, None)
    self._pass_order = (None, None)  # (passes, order) of the last pass drawn.

  # --- What the trainer asks of a problem ---
  def vocab_sizes(self, data_dir=None):
    data = self.manifest["data"]
    return data["input_vocab_size"], data["target_vocab_size"]

  def data_identity(self) -> dict:
    """The identity of the data the batches were cut from (run_identity.data_identity)."""
    return dict(self.manifest["data"])

  def has_data(self, split: str, data_dir=None) -> bool:
    return split == "train" or (split == "dev" and self.manifest["dev_batches"] > 0)

  def count_longer_than(self, data_dir, split, max_length):
    return self.manifest["dropped_long_pairs"] if split == "train" else None

  def dataset(self, split, data_dir=None):
    raise NumpyBatchesError(f"{FLAG}={self.directory}: saved batches, not examples")

  @property
  def num_buckets(self) -> int:
    return int(self.manifest["num_buckets"])

  @property
  def replicas(self) -> int:
    return int(self.manifest["replicas"])

  def check_hparams(self, hparams) -> None:
    """The trainer's hparams must batch as these batches were cut."""
    # Batches saved before a field existed were cut with its default.
    saved = dict(HParams().to_dict(), **self.manifest["hparams"])
    differ = [f"{k}: {saved[k]!r} there vs {getattr(hparams, k)!r} now" for k in BATCHING
              if saved[k] != getattr(hparams, k)]
    if differ:
      raise NumpyBatchesError(f"{FLAG}={self.directory} was cut with other hparams "
                              f"({'; '.join(differ)}); save batches with these hparams")

  # --- Batches ---
  def _batch(self, name: str, i: int) -> Dict[str, np.ndarray]:
    cached_name, data = self._chunk_cache
    if cached_name != name:
      with np.load(os.path.join(self.directory, name), allow_pickle=False) as npz:
        data = {k: npz[k] for k in npz.files}
      self._chunk_cache = (name, data)
    return {key: data[f"{key}_{i}"] for key in FEATURES if f"{key}_{i}" in data}

  def train_batch(self, index: int) -> Dict[str, np.ndarray]:
    """The training batch drawn at position `index` (0-based) of the run's stream.

    The first pass is the saved order; each later pass draws every saved batch
    once in the order `order_of_pass` gives.
    """
    total = self.manifest["train_batches"]
    passes, i = divmod(index, total)
    if passes and i == 0:
      logging.warning("%s=%s: all %d saved training batches used; pass %d draws them again in "
                      "a new order", FLAG, self.directory, total, passes + 1)
    if passes:
      i = int(self.order_of_pass(passes)[i])
    chunk = self.manifest["chunk"]
    return self._batch(f"train-{i // chunk:05d}.npz", i)

  def order_of_pass(self, passes: int) -> np.ndarray:
    """The saved batches' indices in the order pass `passes` + 1 draws them (`passes` >= 1).

    The files in a permuted order and the batches of each file permuted, so
    that a pass loads each file once; seeded by the batches' seed and the
    pass, so a resumed run draws what the killed one would have.
    """
    cached, order = self._pass_order
    if cached != passes:
      total, chunk = self.manifest["train_batches"], self.manifest["chunk"]
      rng = np.random.default_rng([int(self.manifest["random_seed"]), passes])
      order = np.concatenate([
          rng.permutation(np.arange(c * chunk, min((c + 1) * chunk, total)))
          for c in rng.permutation(-(-total // chunk))])
      self._pass_order = (passes, order)
    return order

  def dev_batches(self) -> Iterator[Dict[str, np.ndarray]]:
    for i in range(self.manifest["dev_batches"]):
      yield self._batch("dev.npz", i)


class BatchStream:
  """The trainer's iterator over saved training batches; `position` goes into checkpoints."""

  def __init__(self, saved: SavedBatches, position: int = 0):
    self.saved = saved
    self.position = position

  def __iter__(self):
    return self

  def __next__(self) -> Dict[str, np.ndarray]:
    batch = self.saved.train_batch(self.position)
    self.position += 1
    return batch


# --- Id lists (sources to decode, hypotheses) carried between machines as numpy ---
def save_id_lists(path: str, **lists) -> None:
  """Each name's list of id sequences into one .npz: NAME (int32 [n, longest], zero-padded)
  and NAME_lengths ([n]); `load_id_lists` gives them back."""
  arrays = {}
  for name, sequences in lists.items():
    lengths = np.array([len(s) for s in sequences], np.int32)
    padded = np.zeros([len(sequences), max(int(lengths.max(initial=0)), 1)], np.int32)
    for i, s in enumerate(sequences):
      padded[i, :len(s)] = s
    arrays[name], arrays[name + "_lengths"] = padded, lengths
  with files.atomic_write(path, "wb") as f:
    np.savez(f, **arrays)


def load_id_lists(path: str, name: str):
  """The list NAME saved by `save_id_lists` in `path`: a list of lists of ints."""
  arrays = np.load(path)
  return [[int(i) for i in row[:n]] for row, n in zip(arrays[name], arrays[name + "_lengths"])]
