"""The output directory of a run: effective hparams and the run's identity.

`hparams.json` (every field, vocab sizes included) is written beside the
checkpoints so `t2t-decoder` rebuilds exactly the trained model. Starting a
run in a directory that holds a different run is refused, naming the fields
that differ: nothing the user wrote is overwritten without being asked.
"""

import json
import os

from t2tlite import files
from t2tlite.errors import UserError
from t2tlite.hparams_record import HParams

HPARAMS_FILE = "hparams.json"
RUN_FILE = "run.json"


class RunDirError(UserError):
  """The output directory does not match the requested run."""


def hparams_path(output_dir: str) -> str:
  return os.path.join(output_dir, HPARAMS_FILE)


def prepare(output_dir: str, hparams: HParams, run_info: dict) -> None:
  """Creates output_dir and records hparams/run info, or checks they match what is there."""
  os.makedirs(output_dir, exist_ok=True)
  path = hparams_path(output_dir)
  if os.path.exists(path):
    # xla only says how the same weights are computed: a run saved with xla=true (or before
    # "auto" existed) resumes under today's default, and xla=false may resume an xla=true run.
    saved = HParams.load(path).replace(xla=hparams.xla)
    if saved != hparams:
      diff = [f"{k}: {v!r} there vs {getattr(hparams, k)!r} now"
              for k, v in saved.to_dict().items() if getattr(hparams, k) != v]
      raise RunDirError(f"--output_dir={output_dir} holds a run with other hparams "
                        f"({'; '.join(diff)}); use a new --output_dir")
    saved_run = load_run_info(output_dir)
    for key in ("problem", "model"):
      if saved_run.get(key) not in (None, run_info.get(key)):
        raise RunDirError(f"--output_dir={output_dir} holds a run of {key} "
                          f"{saved_run[key]!r}, not {run_info.get(key)!r}")
    return
  hparams.save(path)
  with files.atomic_write(os.path.join(output_dir, RUN_FILE)) as f:
    json.dump(run_info, f, indent=2, sort_keys=True)


def load_hparams(output_dir: str) -> HParams:
  path = hparams_path(output_dir)
  if not os.path.exists(path):
    raise RunDirError(f"--output_dir={output_dir}: no {HPARAMS_FILE}; is it a t2t-trainer output?")
  return HParams.load(path)


def load_run_info(output_dir: str) -> dict:
  path = os.path.join(output_dir, RUN_FILE)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def _load_errors() -> tuple:
  """What a checkpoint that does not fit the model raises (TensorFlow's, when it is installed)."""
  errors = (ValueError, AssertionError, IndexError, KeyError)
  try:
    import tensorflow as tf  # Heavy: only when a model is really loaded.
  except ImportError:  # JAX-only machine: .npz checkpoints.
    return errors
  return errors + (tf.errors.OpError,)


def load_model(output_dir: str, checkpoint_path: str = None, hparams_overrides: str = ""):
  """Rebuilds the trained model from hparams.json and restores a checkpoint.

  Returns (model, checkpoint_path). `hparams_overrides` may change settings
  that do not alter the weights (e.g. "xla=false"); the restore checks that
  every model variable was found in the checkpoint.
  """
  from t2tlite import registry
  from t2tlite.training import checkpoints

  from t2tlite.training import resume

  hparams = load_hparams(output_dir).override(hparams_overrides)
  model = registry.model(load_run_info(output_dir).get("model", "transformer"))(hparams)
  if checkpoint_path:  # Exactly the one named, or a one-line error.
    path = resume.resolve_checkpoint_path(checkpoint_path)
    resume.verify_or_raise(path)
    try:
      checkpoints.restore_model(model, path)
    except _load_errors() as e:
      raise RunDirError(f"--checkpoint_path={checkpoint_path}: does not load into the run's "
                        f"model ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    return model, path
  # The newest that verifies and loads; skipped ones are logged, nothing is moved.
  path = resume.restore_newest(lambda p: checkpoints.restore_model(model, p), output_dir,
                               is_chief=False)
  if not path:
    raise RunDirError(f"--output_dir={output_dir}: no checkpoint found")
  return model, path
