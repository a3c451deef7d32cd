"""One way to write a file so that a kill or a full disk never leaves half of it, and to hash one.

Every writer in the package goes through `atomic_write` (or `atomic_paths` for
writers that need a path, such as TFRecord or sentencepiece): the bytes go to
`<path>.incomplete`, are flushed to disk, and only then renamed over `path`.
A write that fails removes its temporary file; one killed mid-write leaves a
`.incomplete` file that `remove_incomplete` deletes at the next start.
"""

import contextlib
import hashlib
import os
from typing import Iterator, List, Sequence

TEMP_SUFFIX = ".incomplete"


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str = "utf-8"):
  """`with atomic_write(path) as f: f.write(...)`: all of it lands at `path`, or none."""
  binary = "b" in mode
  with atomic_paths([path]) as (tmp,):
    with open(tmp, mode, **({} if binary else {"encoding": encoding})) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_paths(paths: Sequence[str]) -> Iterator[List[str]]:
  """Yields one temporary path per target; renames them all on success, removes them on error."""
  for path in paths:
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
  tmps = [path + TEMP_SUFFIX for path in paths]
  try:
    yield tmps
  except BaseException as e:
    for tmp in tmps:
      with contextlib.suppress(OSError):
        os.remove(tmp)
    if isinstance(e, OSError) and e.filename is None and e.errno is not None:
      # A failed write() or flush() names no file; a disk-full error must say which.
      raise OSError(e.errno, e.strerror, paths[0] if len(paths) == 1 else ", ".join(paths)) from e
    raise
  for tmp, path in zip(tmps, paths):
    os.replace(tmp, path)


def remove_incomplete(directory: str) -> List[str]:
  """Deletes `*.incomplete` files a killed write left in `directory` (not recursive); returns them."""
  removed = []
  if not os.path.isdir(directory):
    return removed
  for name in sorted(os.listdir(directory)):
    path = os.path.join(directory, name)
    if name.endswith(TEMP_SUFFIX) and os.path.isfile(path):
      os.remove(path)
      removed.append(path)
  return removed


def sha256_file(path: str, chunk: int = 1 << 20) -> str:
  """The SHA-256 of a file's bytes (hex), read in chunks: what every manifest records."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(chunk), b""):
      digest.update(block)
  return digest.hexdigest()
