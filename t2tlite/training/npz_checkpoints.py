"""Checkpoints where TensorFlow is not installed: one `.npz` per checkpoint, same keys.

The GPU machines have JAX but no TensorFlow, so a run there cannot write
TensorFlow's checkpoint files. It writes `DIR/ckpt-N.npz` instead, holding:

- `model/<Keras path>` for every weight and `model/rng_state_<i>` for the
  dropout seed states: the keys of the TensorFlow checkpoint's `model`
  (checkpoints.py), so a loader matches them the same way;
- `optimizer/<i>` for `optimizer.variables` in order (iterations, then Adam's
  moments), `optimizer/paths` naming them, so a resume restores them exactly;
- `seconds_trained` and `batches_read` (the position in the saved batches).

The manifest is the TensorFlow runs' (checkpoint_manifest.py), written after
the file, and rotation keeps the newest `keep_checkpoint_max` as
CheckpointManager does. `checkpoints.restore_model` reads these files on any
backend, so t2t-decoder, t2t-avg-all and t2t-exporter load a run trained
without TensorFlow from its directory as it is; `t2t-avg-all` writes its
average in TensorFlow's format.
"""

import os
from typing import Callable, Dict, List, Optional

import numpy as np

from t2tlite import files
from t2tlite.training import checkpoint_manifest, weight_keys

SUFFIX = ".npz"
MODEL, OPTIMIZER = "model/", "optimizer/"


def path_of(prefix: str) -> str:
  return prefix + SUFFIX


def is_npz(prefix: str) -> bool:
  return os.path.isfile(path_of(prefix))


def write(prefix: str, arrays: Dict[str, np.ndarray]) -> str:
  """Writes `prefix`.npz atomically (a kill leaves only an .incomplete file); returns prefix."""
  os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
  with files.atomic_write(path_of(prefix), "wb") as f:
    np.savez(f, **arrays)
  return prefix


def read(prefix: str) -> Dict[str, np.ndarray]:
  with np.load(path_of(prefix), allow_pickle=False) as data:
    return {k: data[k] for k in data.files}


def model_arrays(model) -> Dict[str, np.ndarray]:
  return {MODEL + k: weight_keys.to_numpy(v)
          for k, v in weight_keys.named_variables(model).items()}


def optimizer_arrays(optimizer) -> Dict[str, np.ndarray]:
  out = {f"{OPTIMIZER}{i}": weight_keys.to_numpy(v) for i, v in enumerate(optimizer.variables)}
  out[OPTIMIZER + "paths"] = np.array([v.path for v in optimizer.variables])
  return out


def write_model(model, prefix: str) -> str:
  """A model-only checkpoint at exactly `prefix` (best/, averaged/), as checkpoints.write_model."""
  return write(prefix, model_arrays(model))


def _assign(variables: Dict[str, object], arrays: Dict[str, np.ndarray], prefix: str) -> None:
  """Assigns every variable its array; all must be there with the same shape, or nothing is assigned."""
  missing = [k for k in variables if k not in arrays]
  if missing:
    raise ValueError(f"{path_of(prefix)} lacks {len(missing)} of the variables, e.g. {missing[0]}")
  for key, variable in variables.items():
    if tuple(arrays[key].shape) != tuple(variable.shape):
      raise ValueError(f"{path_of(prefix)}: {key} is {list(arrays[key].shape)} there and "
                       f"{list(variable.shape)} here")
  for key, variable in variables.items():
    variable.assign(arrays[key].astype(variable.dtype))


def restore_model(model, prefix: str, arrays: Optional[dict] = None) -> None:
  """Assigns every model variable from `prefix`.npz (extra keys, e.g. the optimizer's, ignored)."""
  arrays = read(prefix) if arrays is None else arrays
  named = weight_keys.named_variables(model)
  _assign({MODEL + k: v for k, v in named.items()}, arrays, prefix)


def restore_optimizer(optimizer, prefix: str, arrays: dict) -> None:
  _assign({f"{OPTIMIZER}{i}": v for i, v in enumerate(optimizer.variables)}, arrays, prefix)


class NpzCheckpointManager:
  """The part of tf.train.CheckpointManager the trainer uses, for .npz checkpoints.

  `save(number)` writes `DIR/ckpt-<number>.npz` from `collect()` and then
  deletes all but the newest `max_to_keep` (the trainer writes the manifest
  of the new one, and removes the manifests left without a checkpoint).
  """

  def __init__(self, directory: str, max_to_keep: int, collect: Callable[[], dict]):
    self.directory = directory
    self.max_to_keep = max_to_keep
    self._collect = collect

  @property
  def checkpoints(self) -> List[str]:
    return [p for p in checkpoint_manifest.list_checkpoints(self.directory) if is_npz(p)]

  @property
  def latest_checkpoint(self) -> Optional[str]:
    found = self.checkpoints
    return found[-1] if found else None

  def save(self, checkpoint_number: int) -> str:
    prefix = write(os.path.join(self.directory, f"ckpt-{checkpoint_number}"), self._collect())
    for old in self.checkpoints[:-self.max_to_keep]:
      os.remove(path_of(old))
    return prefix
