"""Checkpoint integrity: a checksum manifest written last, verified before any restore.

A checkpoint `DIR/ckpt-N` is whatever files the saver wrote under that prefix
(TensorFlow: `ckpt-N.index` and `ckpt-N.data-*`; without TensorFlow
`ckpt-N.npz`, npz_checkpoints.py). Once they are complete the trainer writes `ckpt-N.manifest.json`,
atomically and last, listing each file's size and SHA-256. So:

- a checkpoint with a manifest is complete, and `verify` tells whether its
  bytes are still the ones written (truncation, a flipped byte, a deleted or
  replaced file), without loading a single tensor;
- a checkpoint without one was cut short by a kill (or predates manifests;
  then the restore itself is the test).

Plain files and hashes only, no TensorFlow: a saver on another framework
(JAX) writing the same prefixes reuses this module unchanged. Nothing here
deletes a checkpoint; a damaged one is moved aside into `DIR/corrupt/`.
"""

import json
import os
import re
from typing import Dict, Iterable, List, Optional, Tuple

from t2tlite import files
from t2tlite.errors import UserError

MANIFEST_SUFFIX = ".manifest.json"
CORRUPT_DIR = "corrupt"
FORMAT = "t2tlite-checkpoint-manifest/1"
_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.(index|npz|manifest\.json)$")
# Sidecars and leftovers that are not part of a checkpoint's bytes.
_NOT_CHECKPOINT = (MANIFEST_SUFFIX, ".json", files.TEMP_SUFFIX, ".tmp")


class CheckpointError(UserError):
  """A checkpoint that is missing, damaged, or cannot be used; one line naming it."""


def manifest_path(prefix: str) -> str:
  return prefix + MANIFEST_SUFFIX


def step_of(prefix: str) -> int:
  """N of `.../ckpt-N`."""
  try:
    return int(os.path.basename(prefix).rsplit("-", 1)[1])
  except (IndexError, ValueError):
    raise CheckpointError(f"{prefix}: not a ckpt-<step> checkpoint") from None


def checkpoint_files(prefix: str) -> List[str]:
  """The files of checkpoint `prefix` (`prefix.*`, sidecars and temporaries excluded), sorted."""
  directory, base = os.path.split(prefix)
  directory = directory or "."
  if not os.path.isdir(directory):
    return []
  found = []
  for name in os.listdir(directory):
    if not name.startswith(base + ".") or name.endswith(_NOT_CHECKPOINT):
      continue
    if os.path.isfile(os.path.join(directory, name)):
      found.append(os.path.join(directory, name))
  return sorted(found)


def write_manifest(prefix: str, paths: Optional[Iterable[str]] = None) -> str:
  """Records size and SHA-256 of each file of `prefix` (default: all of them); returns its path.

  Call it after the saver has finished: the manifest is what marks the
  checkpoint complete.
  """
  paths = sorted(paths) if paths is not None else checkpoint_files(prefix)
  if not paths:
    raise CheckpointError(f"{prefix}: no checkpoint files to record")
  entries = {os.path.basename(p): {"bytes": os.path.getsize(p), "sha256": files.sha256_file(p)}
             for p in paths}
  path = manifest_path(prefix)
  with files.atomic_write(path) as f:
    json.dump({"format": FORMAT, "step": step_of(prefix), "files": entries}, f, indent=1,
              sort_keys=True)
    f.write("\n")
  return path


def read_manifest(prefix: str) -> Optional[dict]:
  """The manifest of `prefix`, or None when there is none; a damaged one raises."""
  path = manifest_path(prefix)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      manifest = json.load(f)
    if manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict):
      raise ValueError("unknown format")
  except (ValueError, UnicodeDecodeError) as e:
    raise CheckpointError(f"{path}: unreadable manifest ({e})") from None
  return manifest


def verify(prefix: str, full: bool = True) -> Tuple[str, str]:
  """("ok" | "unverified" | "bad", reason) for checkpoint `prefix`.

  "unverified": no manifest (a checkpoint written before manifests, or one a
  kill cut short); the caller decides by trying to load it. `full=False`
  checks sizes only (no reading).
  """
  try:
    manifest = read_manifest(prefix)
  except CheckpointError as e:
    return "bad", str(e)
  if manifest is None:
    if not checkpoint_files(prefix):
      return "bad", f"{prefix}: no such checkpoint"
    return "unverified", f"{manifest_path(prefix)} missing"
  directory = os.path.dirname(prefix)
  for name, entry in sorted(manifest["files"].items()):
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
      return "bad", f"{path} is missing"
    size = os.path.getsize(path)
    if size != entry["bytes"]:
      return "bad", f"{path} has {size} bytes, its manifest says {entry['bytes']}"
    if full and files.sha256_file(path) != entry["sha256"]:
      return "bad", f"{path}: SHA-256 differs from its manifest (bytes changed since it was saved)"
  return "ok", ""


def list_checkpoints(directory: str) -> List[str]:
  """Prefixes `directory/ckpt-N` of every checkpoint there (index, npz or manifest present), oldest first."""
  if not os.path.isdir(directory):
    return []
  steps = {int(m.group(1)) for m in map(_CHECKPOINT.match, os.listdir(directory)) if m}
  return [os.path.join(directory, f"ckpt-{step}") for step in sorted(steps)]


def all_files(prefix: str) -> List[str]:
  """Every file of `prefix`, its manifest included (what moving it aside moves)."""
  extra = [manifest_path(prefix)] if os.path.exists(manifest_path(prefix)) else []
  return checkpoint_files(prefix) + extra


def move_aside(prefix: str) -> str:
  """Moves a damaged checkpoint's files into `DIR/corrupt/` (never deletes); returns that folder.

  Frees the number `ckpt-N` so training can write it again without
  overwriting anything, and keeps the bytes for whoever wants to look.
  """
  directory = os.path.join(os.path.dirname(prefix), CORRUPT_DIR)
  os.makedirs(directory, exist_ok=True)
  for path in all_files(prefix):
    target = os.path.join(directory, os.path.basename(path))
    suffix = 1
    while os.path.exists(target):  # Moved aside before: keep both.
      target = os.path.join(directory, f"{os.path.basename(path)}.{suffix}")
      suffix += 1
    os.replace(path, target)
  return directory


def describe(prefixes: Dict[str, str]) -> str:
  """"ckpt-120 (reason); ckpt-80 (reason)" for an error line."""
  return "; ".join(f"{os.path.basename(p)} ({why})" for p, why in prefixes.items())
