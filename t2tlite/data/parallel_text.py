"""Line-aligned parallel text files, checked before anything is written.

Translation problems read (source file, target file) pairs, plain or gzipped.
Everything a user can get wrong is caught with one line naming the file (and
line): a missing file, sides with different line counts (checked up front, so
a mismatch costs nothing and writes nothing), and invalid UTF-8. Pairs with an
empty side carry no training signal: `drop_empty` drops them and counts them
in `LineStats` for the log.
"""

import dataclasses
import gzip
import os
from typing import Iterator, Tuple

from t2tlite.errors import UserError


class ParallelTextError(UserError):
  """Bad parallel text; one line naming the file(s) at fault."""


@dataclasses.dataclass
class LineStats:
  """What reading a pair of files kept and dropped."""

  read: int = 0  # Line pairs read.
  kept: int = 0  # Pairs yielded.
  empty: int = 0  # Pairs dropped because a side was empty (or only whitespace).


def open_text(path: str):
  """Binary file object, decompressed if the file is gzip (by its magic bytes).

  The file is opened once and its magic bytes peeked, not read: a pipe
  (`--decode_from_file=<(zcat ...)`, /dev/stdin, a FIFO) cannot be opened twice,
  and a second open read nothing, so the command wrote an empty output.
  """
  if not os.path.exists(path):
    raise ParallelTextError(f"{path}: no such file")
  f = open(path, "rb")
  if f.peek(2)[:2] == b"\x1f\x8b":
    return _OwningGzipFile(f)
  return f


class _OwningGzipFile(gzip.GzipFile):
  """A GzipFile over an open file that closes that file too (GzipFile(fileobj=) does not)."""

  def __init__(self, raw):
    super().__init__(fileobj=raw, mode="rb")
    self._raw = raw

  def close(self):
    try:
      super().close()
    finally:
      self._raw.close()


def count_lines(path: str) -> int:
  """Lines in the file, a last line without its newline included, in one pass."""
  count, last = 0, b"\n"
  with open_text(path) as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      count += chunk.count(b"\n")
      last = chunk[-1:]
  return count + (last != b"\n")


def read_lines(path: str) -> Iterator[str]:
  """Lines without their newline; invalid UTF-8 is an error naming file and line."""
  with open_text(path) as f:
    for number, raw in enumerate(f, 1):
      try:
        yield raw.decode("utf-8").rstrip("\r\n")
      except UnicodeDecodeError as e:
        raise ParallelTextError(f"{path}: line {number} is not valid UTF-8 "
                                f"(byte {e.start}: {raw[e.start:e.start + 1]!r})") from None


def read_parallel(source_path: str, target_path: str) -> Iterator[Tuple[str, str]]:
  """(source, target) line pairs, after checking that the files align.

  Empty lines are kept here; `drop_empty` (used by every translation problem,
  whatever its source) drops and counts them. Both files are read twice
  (counted, then read), so a pipe is refused by name, not read as empty.
  """
  for path in (source_path, target_path):
    if os.path.exists(path) and not os.path.isfile(path):
      raise ParallelTextError(f"{path}: not a regular file (parallel files are counted, "
                              f"then read: write the pipe's text to a file)")
  n_source, n_target = count_lines(source_path), count_lines(target_path)
  if n_source != n_target:
    raise ParallelTextError(f"{source_path} has {n_source} lines but {target_path} has "
                            f"{n_target}; parallel files must align line by line")
  yield from zip(read_lines(source_path), read_lines(target_path))


def drop_empty(pairs, stats: LineStats) -> Iterator[Tuple[str, str]]:
  """Pairs with both sides non-blank; what was read and dropped goes into `stats`."""
  for source, target in pairs:
    stats.read += 1
    if not source.strip() or not target.strip():
      stats.empty += 1
      continue
    stats.kept += 1
    yield source, target
