"""Checkpoint averaging: the mean of the last N checkpoints (paper, Section 6.1), or of the N best.

The paper decodes the base models with the average of the last 5 checkpoints
(written at 10-minute intervals) and the big models with the last 20. The
average is written as a model-only checkpoint, `averaged/ckpt-<last step>`,
in the run directory, which `run_dir.load_model` and `t2t-decoder
--checkpoint_path` load like any other. It lives in a subdirectory so the
training CheckpointManager never deletes it, counts it against
`keep_checkpoint_max`, or resumes training from it, and nothing already there
is replaced unless asked. A json beside it records what was averaged.

The paper's choice, the last N, is the default. `best=True` averages instead
the N checkpoints with the best dev metric that `--keep_best` held in best/
(`--average_best_n`, keep_best.py), written to `averaged_best/ckpt-<newest
step averaged>`: a run that over-fits before its budget ends has its best
checkpoints well before its last ones. Which checkpoints those are is the dev
set's choice, so test stays untouched. `average_steps` averages exactly the
checkpoints the caller names (tensor2tensor's avg_checkpoints.py
--checkpoints), for a window chosen after the run, into a path outside the
directories the trainer writes.

Checkpoints are read by restoring them into the run's model (rebuilt from
hparams.json), not by rebuilding checkpoint keys, so each one is checked to
hold every model variable exactly as `t2t-decoder` will later check it.
"""

import collections
import json
import os
from typing import List, Sequence, Tuple

from absl import logging

from t2tlite import files
from t2tlite.progress import Progress
from t2tlite.training import checkpoint_manifest, keep_best, run_dir

AVERAGED_DIR = "averaged"
AVERAGED_BEST_DIR = "averaged_best"


def available_checkpoints(output_dir: str) -> List[str]:
  """The run's checkpoints that still exist, oldest first.

  Read from the `checkpoint` state file, as the trainer does on resume, so
  only checkpoints the CheckpointManager finished writing are candidates. A
  run trained without TensorFlow (npz_checkpoints.py) has no state file: its
  complete checkpoints are those with a manifest.
  """
  from t2tlite.training import npz_checkpoints
  if not os.path.exists(os.path.join(output_dir, "checkpoint")):
    paths = [p for p in checkpoint_manifest.list_checkpoints(output_dir)
             if npz_checkpoints.is_npz(p) and checkpoint_manifest.read_manifest(p)]
  else:
    import tensorflow as tf  # Heavy: only when checkpoints are really read.
    state = tf.train.get_checkpoint_state(output_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    paths = [p for p in paths if os.path.exists(p + ".index")]
  # ckpt-0 is the untrained start (saved so a run killed early resumes): never averaged.
  paths = [p for p in paths if checkpoint_manifest.step_of(p) > 0]
  return sorted(set(paths), key=checkpoint_manifest.step_of)


def averaged_path(output_dir: str, step: int, best: bool = False) -> str:
  """Where the average ending at checkpoint `step` is written (of the best ones: `best`)."""
  return os.path.join(output_dir, AVERAGED_BEST_DIR if best else AVERAGED_DIR, f"ckpt-{step}")


def _best_checkpoints(output_dir: str, n: int) -> Tuple[List[str], dict]:
  """The `n` best checkpoints best/ holds, oldest first, and what the json records of them."""
  metric, kept = keep_best.kept_checkpoints(output_dir)
  kept = kept[:n]
  if not kept:
    raise run_dir.RunDirError(f"--output_dir={output_dir}: no best checkpoints in "
                              f"{keep_best.best_dir(output_dir)}; train with --keep_best=METRIC "
                              "--average_best_n=N to keep them")
  kept.sort(key=lambda pair: checkpoint_manifest.step_of(pair[0]))
  return [p for p, _ in kept], {"metric": metric, "values": [v for _, v in kept]}


def average_checkpoints(output_dir: str, n: int, overwrite: bool = False,
                        best: bool = False, keep_existing: bool = False) -> str:
  """Averages the last (`best`: the best) `n` checkpoints of the run in `output_dir`.

  Returns the new prefix.

  Every floating-point model weight becomes the mean of its values in those
  checkpoints, computed in float64 and cast back to the weight's dtype.
  Everything else (dropout RNG states, any integer weights) is taken from
  the newest checkpoint: a mean of RNG states is not a state.

  With fewer than `n` checkpoints (`best`: kept in best/), all of them are
  averaged and a warning is logged (as tensor2tensor's avg_checkpoints does),
  so a short run still gets its average; the json beside the result records
  `n` and the checkpoints (relative to `output_dir`) and steps actually
  averaged, and for `best` the dev metric and each one's value.

  When the result exists: `overwrite` replaces it, `keep_existing` returns it
  as it is (a rerun of a finished training run), and otherwise it is an error.

  Raises run_dir.RunDirError (one line for the user) if `output_dir` holds no
  run or no checkpoint, or if the result exists and neither flag is set.
  """
  if n < 1:
    raise ValueError(f"n={n}: average at least 1 checkpoint")
  _require_run_dir(output_dir)
  if best:
    paths, selection = _best_checkpoints(output_dir, n)
  else:
    paths, selection = available_checkpoints(output_dir)[-n:], {}
    if not paths:
      raise run_dir.RunDirError(f"--output_dir={output_dir}: no checkpoint found")
  if len(paths) < n:
    logging.warning("%s holds %d %scheckpoints, fewer than n=%d: averaging all of them",
                    output_dir, len(paths), "best " if best else "", n)
  target = averaged_path(output_dir, checkpoint_manifest.step_of(paths[-1]), best=best)
  if checkpoint_manifest.checkpoint_files(target) and not overwrite and keep_existing:
    logging.info("%s exists: kept (t2t-avg-all --overwrite replaces it)", target)
    return target
  return _write_average(output_dir, paths, target, n, selection, overwrite)


def average_steps(output_dir: str, steps: Sequence[int], output_path: str,
                  overwrite: bool = False) -> str:
  """Averages exactly the run's checkpoints at `steps` into `output_path`; returns it.

  For a window chosen after the run (tensor2tensor's avg_checkpoints.py
  --checkpoints, fairseq's --inputs): the N best by another dev metric, a
  wider tail. The result is written where asked, never into the run's own
  directory beside its checkpoints (the trainer's averaged/ keeps the last
  N), and an existing one is replaced only with `overwrite`; the json beside
  it records the steps, as average_checkpoints' does.

  Raises run_dir.RunDirError (one line for the user) for a step the run holds
  no checkpoint of, a repeated step, or a forbidden or existing output_path.
  """
  _require_run_dir(output_dir)
  if not steps:
    raise ValueError("steps: name at least 1 checkpoint")
  repeated = [step for step, count in collections.Counter(steps).items() if count > 1]
  if repeated:
    raise run_dir.RunDirError(f"--steps: step {repeated[0]} named twice")
  held = {checkpoint_manifest.step_of(p): p for p in available_checkpoints(output_dir)}
  missing = [s for s in steps if s not in held]
  if missing:
    raise run_dir.RunDirError(
        f"--steps: {output_dir} holds no checkpoint of step {missing[0]} (it holds "
        f"{', '.join(str(s) for s in sorted(held)) or 'none'})")
  _check_output_path(output_dir, output_path)
  paths = [held[s] for s in sorted(steps)]
  return _write_average(output_dir, paths, output_path, len(paths), {}, overwrite)


def _check_output_path(output_dir: str, output_path: str) -> None:
  """A checkpoint prefix outside the directories the trainer and its averaging own."""
  if not os.path.basename(output_path) or os.path.isdir(output_path):
    raise run_dir.RunDirError(f"--output_path={output_path}: names a directory; give a "
                              "checkpoint prefix, e.g. DIR/ckpt-N")
  where = os.path.realpath(os.path.dirname(output_path) or ".")
  run = os.path.realpath(output_dir)
  owned = {run: "the run's own checkpoints"}
  for sub in (AVERAGED_DIR, AVERAGED_BEST_DIR, keep_best.BEST_DIR):
    owned[os.path.join(run, sub)] = f"the trainer's {sub}/"
  if where in owned:
    raise run_dir.RunDirError(f"--output_path={output_path}: would sit among {owned[where]}; "
                              "name another directory")


def _require_run_dir(output_dir: str) -> None:
  if not os.path.isdir(output_dir):
    raise run_dir.RunDirError(f"--output_dir={output_dir}: no such directory")


def _write_average(output_dir: str, paths: List[str], target: str, n: int, selection: dict,
                   overwrite: bool) -> str:
  """Writes the mean of `paths` (oldest first) to `target`, and what was averaged beside it."""
  for path in paths:  # A damaged checkpoint must not slip into the mean.
    status, why = checkpoint_manifest.verify(path)
    if status == "bad":
      raise checkpoint_manifest.CheckpointError(f"{path}: damaged checkpoint ({why}); the "
                                                "trainer's next start moves it aside")
  if checkpoint_manifest.checkpoint_files(target) and not overwrite:
    raise run_dir.RunDirError(f"{target} exists; pass --overwrite to replace it")

  import numpy as np
  from t2tlite.training import checkpoints, weight_keys

  model, _ = run_dir.load_model(output_dir, paths[0])
  first = [(w, weight_keys.to_numpy(w)) for w in model.weights]
  first = [(w, value) for w, value in first if np.issubdtype(value.dtype, np.floating)]
  weights = [w for w, _ in first]
  dtypes = [value.dtype for _, value in first]  # Read once: the average is cast back to these.
  sums = [value.astype("float64") for _, value in first]
  progress = Progress("averaging", len(paths), "checkpoints")
  progress.update(1)
  for done, path in enumerate(paths[1:], 2):  # Newest last: the model ends with its RNG states.
    checkpoints.restore_model(model, path)
    for total, w in zip(sums, weights):
      total += weight_keys.to_numpy(w)
    progress.update(done)
  for total, w, dtype in zip(sums, weights, dtypes):
    w.assign((total / len(paths)).astype(dtype))

  os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
  checkpoints.write_model(model, target)
  checkpoint_manifest.write_manifest(target)
  _write_json(target + ".json", {
      "n": n,
      "checkpoints": [os.path.relpath(p, output_dir) for p in paths],
      "steps": [checkpoint_manifest.step_of(p) for p in paths],
      **selection,
  })
  logging.info("averaged %d checkpoints (steps %s) into %s", len(paths),
               ", ".join(str(checkpoint_manifest.step_of(p)) for p in paths), target)
  return target


def averaged_steps(prefix: str) -> List[int]:
  """The steps the average at `prefix` holds, from the json average_checkpoints wrote beside it.

  Two averages of the same steps are the same model, so a caller comparing
  averages (the recipes' dev choice) asks this rather than the prefixes.
  """
  path = prefix + ".json"
  try:
    with open(path, encoding="utf-8") as f:
      return [int(step) for step in json.load(f)["steps"]]
  except FileNotFoundError:
    raise run_dir.RunDirError(f"{path}: missing; was {prefix} written by averaging?") from None
  except (ValueError, KeyError, TypeError) as e:
    raise run_dir.RunDirError(f"{path}: no list of averaged steps ({e})") from None


def _write_json(path: str, value: dict) -> None:
  with files.atomic_write(path) as f:
    json.dump(value, f, indent=2)
