"""Resuming a run without losing or mixing work: which checkpoint, and what to clean.

- `restore_newest` walks back from the newest checkpoint to the newest one
  that verifies (checkpoint_manifest) and loads, saying at WARNING which it
  skipped and why; the skipped ones are moved into `corrupt/` (not deleted),
  so the numbers are free again and rotation never counts them. When none
  loads it is an error, never a silent restart from step 0.
- `check_not_orphaned`: a run directory whose checkpoints were all removed
  (run.json there, the `checkpoint` state file there, no ckpt-N) is refused
  unless --overwrite_run. A run killed before its first save has no state
  file and simply starts (the trainer saves ckpt-0 first thing).
- `set_aside_for_overwrite`: --overwrite_run moves the old run into
  `previous-K/` rather than deleting anything.
- `remove_leftovers`: the temporary files and `_temp` folders a killed save
  leaves.
- `resolve_checkpoint_path`: what `--checkpoint_path` may name.
"""

import os
import re
import shutil
from typing import List, Optional

from absl import logging

from t2tlite import files
from t2tlite.training import checkpoint_manifest as manifest
from t2tlite.training.checkpoint_manifest import CheckpointError

STATE_FILE = "checkpoint"  # TensorFlow's CheckpointManager state file.
_KEEP_ON_OVERWRITE = {".run.lock", ".run.lock.owner"}
# Leftovers of an interrupted write: ours (.incomplete, .tmp) and TensorFlow's
# (state file `checkpoint.tmp<hex>`, sharded-save `*.tempstate<n>`).
_LEFTOVER_FILE = re.compile(r"(\.incomplete|\.tmp|\.tmp[0-9a-f]{32}|\.tempstate\d+)$")
_LEFTOVER_DIR = re.compile(r"^ckpt-\d+_temp")


def remove_leftovers(output_dir: str) -> List[str]:
  """Deletes what a killed write left in output_dir (and its averages); returns the paths."""
  removed = []
  # averaging.AVERAGED_DIR and AVERAGED_BEST_DIR, spelled out: averaging imports run_dir, which
  # imports this module, and the package keeps its imports free of circles.
  for directory in (output_dir, os.path.join(output_dir, "averaged"),
                    os.path.join(output_dir, "averaged_best")):
    if not os.path.isdir(directory):
      continue
    removed += files.remove_incomplete(directory)
    for name in sorted(os.listdir(directory)):
      path = os.path.join(directory, name)
      if os.path.isdir(path) and _LEFTOVER_DIR.match(name):
        shutil.rmtree(path)
        removed.append(path)
      elif os.path.isfile(path) and _LEFTOVER_FILE.search(name):
        os.remove(path)
        removed.append(path)
  for path in removed:
    logging.info("removed %s, left by an interrupted write", path)
  return removed


def check_not_orphaned(output_dir: str, run_file: str) -> None:
  """Refuses a run whose checkpoints are gone: resuming it would silently restart at step 0."""
  if (os.path.exists(os.path.join(output_dir, run_file)) and
      os.path.exists(os.path.join(output_dir, STATE_FILE)) and
      not manifest.list_checkpoints(output_dir)):
    raise CheckpointError(
        f"--output_dir={output_dir} holds a run ({run_file}) whose checkpoints are gone; "
        "restore them, or pass --overwrite_run to start over (the old files are moved "
        "into previous-N/, not deleted)")


def set_aside_for_overwrite(output_dir: str) -> Optional[str]:
  """--overwrite_run: moves everything of the old run into output_dir/previous-K/."""
  if not os.path.isdir(output_dir):
    return None
  names = [n for n in os.listdir(output_dir)
           if n not in _KEEP_ON_OVERWRITE and not n.startswith("previous-")]
  if not names:
    return None
  k = 1
  while os.path.exists(os.path.join(output_dir, f"previous-{k}")):
    k += 1
  target = os.path.join(output_dir, f"previous-{k}")
  os.makedirs(target)
  for name in names:
    os.replace(os.path.join(output_dir, name), os.path.join(target, name))
  logging.warning("--overwrite_run: moved the previous run's %d files into %s", len(names), target)
  return target


def restore_newest(restore_fn, output_dir: str, is_chief: bool) -> Optional[str]:
  """Restores the newest checkpoint that verifies and loads; returns it (None: there is none).

  `restore_fn(prefix)` loads one checkpoint and raises if it cannot. On the
  chief, the checkpoints skipped are moved into corrupt/ and a loaded one
  without a manifest (a kill between save and manifest) gets one.
  """
  candidates = manifest.list_checkpoints(output_dir)
  skipped = {}
  for prefix in reversed(candidates):
    status, why = manifest.verify(prefix)
    if status != "bad":
      try:
        restore_fn(prefix)
      except Exception as e:  # noqa: BLE001 - any failure to load means "try an older one".
        status, why = "bad", f"does not load: {type(e).__name__}: {_first_line(e)}"
    if status == "bad":
      logging.warning("checkpoint %s skipped: %s", prefix, why)
      skipped[prefix] = why
      continue
    if skipped:
      logging.warning("resuming from %s, older than the %d damaged checkpoint(s) skipped (%s)",
                      os.path.basename(prefix), len(skipped),
                      ", ".join(os.path.basename(p) for p in skipped))
      if is_chief:
        for bad in skipped:
          logging.warning("moved %s's files into %s (kept, not deleted)", bad,
                          manifest.move_aside(bad))
    if status == "unverified" and is_chief:
      manifest.write_manifest(prefix)
      logging.info("%s had no manifest (written before manifests, or killed before it): it "
                   "loads, so one was recorded", prefix)
    if is_chief:
      write_state(output_dir)
    return prefix
  if skipped:
    raise CheckpointError(f"--output_dir={output_dir}: none of its {len(skipped)} checkpoints "
                          f"loads: {manifest.describe(skipped)}")
  return None


def write_state(output_dir: str) -> None:
  """Rewrites TensorFlow's `checkpoint` state file to list exactly the checkpoints present.

  A run without TensorFlow (.npz checkpoints) has no state file: nothing to do.
  """
  present = [p for p in manifest.list_checkpoints(output_dir) if os.path.exists(p + ".index")]
  if present:
    from tensorflow.python.checkpoint import checkpoint_management  # The public one is deprecated.
    # Timestamps, and none "preserved": CheckpointManager's rotation may then drop the oldest.
    checkpoint_management.update_checkpoint_state_internal(
        save_dir=output_dir, model_checkpoint_path=present[-1],
        all_model_checkpoint_paths=present,
        all_model_checkpoint_timestamps=[os.path.getmtime(p + ".index") for p in present],
        last_preserved_timestamp=0.0)


def remove_orphan_manifests(output_dir: str) -> None:
  """Deletes the manifest of a checkpoint rotation removed entirely (no file of it left)."""
  for prefix in manifest.list_checkpoints(output_dir):
    if not manifest.checkpoint_files(prefix) and os.path.exists(manifest.manifest_path(prefix)):
      os.remove(manifest.manifest_path(prefix))


def resolve_checkpoint_path(path: str, flag: str = "--checkpoint_path") -> str:
  """The checkpoint prefix a user's path names: `ckpt-200`, or its `.index`/`.data-*`/`.npz`/manifest file."""
  if os.path.isdir(path):
    newest = manifest.list_checkpoints(path)
    hint = f", e.g. {newest[-1]}" if newest else ""
    raise CheckpointError(f"{flag}={path} is a directory; name a checkpoint prefix{hint} "
                          "(or leave the flag out to use the run's newest)")
  prefix = re.sub(r"(\.index|\.npz|\.data-\d{5}-of-\d{5}|\.manifest\.json)$", "", path)
  if not manifest.checkpoint_files(prefix):
    directory = os.path.dirname(prefix) or "."
    there = [os.path.basename(p) for p in manifest.list_checkpoints(directory)]
    listing = f"checkpoints there: {', '.join(there[-5:])}" if there else "no checkpoint there"
    raise CheckpointError(f"{flag}={path}: no such checkpoint ({listing})")
  return prefix


def verify_or_raise(prefix: str, flag: str = "--checkpoint_path") -> None:
  """For a checkpoint the user named: refuse it when its manifest says it is damaged."""
  status, why = manifest.verify(prefix)
  if status == "bad":
    raise CheckpointError(f"{flag}={prefix}: damaged checkpoint ({why})")


def last_logged_step(directory: str) -> int:
  """The highest step with a summary in the event files of `directory` (-1: none)."""
  from t2tlite.training import curves  # TensorFlow's: imported only where events are read.
  last = -1
  for path in curves.event_files(directory):
    for event in curves.read_events(path):  # Cut short by a kill: what was read counts.
      if event.summary.value:
        last = max(last, int(event.step))
  return last


def _first_line(error) -> str:
  text = str(getattr(error, "message", "") or error)
  return (text.strip().splitlines() or [""])[0][:200]
