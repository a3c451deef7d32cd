"""One trainer per run directory: an OS lock that dies with its owner.

Two trainers writing one output_dir interleave their checkpoints (ckpt-40
from one, ckpt-120 from the other) and `t2t-avg-all` would average them. The
chief takes an exclusive `filelock` lock on `DIR/.run.lock` (flock: released
by the kernel when the process ends, even by `kill -9`, so no stale lock
outlives a crash) and writes its pid and host beside it, in
`DIR/.run.lock.owner`, for the error the second trainer prints.

Within one process the lock is taken once and kept until `release` or exit,
so code that builds several Trainers on one directory in turn (tests, a
notebook) does not lock itself out.
"""

import json
import os
import socket
import time
from typing import Dict

import filelock

from t2tlite import files
from t2tlite.errors import UserError

LOCK_FILE = ".run.lock"
OWNER_FILE = ".run.lock.owner"

_held: Dict[str, filelock.BaseFileLock] = {}


class RunLockedError(UserError):
  """Another live process holds the run directory."""


def acquire(output_dir: str) -> None:
  """Locks `output_dir` for this process, or raises RunLockedError naming the holder."""
  key = os.path.realpath(output_dir)
  if key in _held:
    return
  os.makedirs(output_dir, exist_ok=True)
  lock = filelock.FileLock(os.path.join(output_dir, LOCK_FILE), timeout=0)
  try:
    lock.acquire()
  except filelock.Timeout:
    raise RunLockedError(f"--output_dir={output_dir} is in use by another trainer "
                         f"({owner(output_dir)}); wait for it to end, or use another "
                         "--output_dir") from None
  _held[key] = lock
  with files.atomic_write(os.path.join(output_dir, OWNER_FILE)) as f:
    json.dump({"pid": os.getpid(), "host": socket.gethostname(),
               "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}, f)


def owner(output_dir: str) -> str:
  """"pid 123 on host h since ..." from the owner file, as well as it can be read."""
  try:
    with open(os.path.join(output_dir, OWNER_FILE)) as f:
      info = json.load(f)
    return f"pid {info['pid']} on host {info['host']}, since {info['since']}"
  except (OSError, ValueError, KeyError):
    return "owner unknown"


def release(output_dir: str) -> None:
  lock = _held.pop(os.path.realpath(output_dir), None)
  if lock is not None:
    lock.release()
