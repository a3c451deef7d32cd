"""One progress reporter for the long commands: done/total, rate and ETA on stderr.

t2t-decoder (lines), t2t-datagen (pairs) and t2t-avg-all (checkpoints) can run
for minutes with nothing else to say; each reports through `Progress`, at a
steady interval (10 s, or $T2T_PROGRESS_SECONDS; 0 reports every update,
which the tests use), so a user can tell a slow run from a hung one:

  decoding: 120/273 lines (44.0%), 3.2 lines/s, ETA 0m48s

The trainer's own line (loss, learning rate, tokens/s) is in
t2tlite/training/progress.py; it shares `format_duration`.
"""

import os
import time
from typing import Callable, Optional

from absl import logging

INTERVAL_ENV = "T2T_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 10.0


def default_interval() -> float:
  """Seconds between lines: $T2T_PROGRESS_SECONDS if set (and a number >= 0), else 10."""
  try:
    return max(float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL)), 0.0)
  except ValueError:
    return DEFAULT_INTERVAL


def format_duration(seconds: float) -> str:
  """3725 -> "1h02m", 48 -> "0m48s": short enough for a progress line."""
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


class Progress:
  """Reports `what: done/total unit (pct), rate unit/s, ETA` at most every `interval` seconds.

  `update(done)` takes the running count (not an increment); `finish()` logs
  the total and the overall rate once. `total` may be None (unknown: no
  percentage, no ETA). `clock` and `write` are injectable for tests.
  """

  def __init__(self, what: str, total: Optional[int] = None, unit: str = "items",
               interval: Optional[float] = None, clock: Callable[[], float] = time.monotonic,
               write: Optional[Callable[[str], None]] = None):
    self.what, self.total, self.unit = what, total, unit
    self.interval = default_interval() if interval is None else interval
    self.clock = clock
    self.write = write or (lambda line: logging.info("%s", line))
    self.start = self.last = clock()
    self.done = 0

  def update(self, done: int) -> Optional[str]:
    """Records the running count; returns (and writes) a line when the interval has passed."""
    self.done = done
    now = self.clock()
    if now - self.last < self.interval:
      return None
    self.last = now
    line = self.line(done, now - self.start)
    self.write(line)
    return line

  def line(self, done: int, seconds: float) -> str:
    rate = done / seconds if seconds > 0 else 0.0
    count = f"{done:,}/{self.total:,}" if self.total else f"{done:,}"
    out = f"{self.what}: {count} {self.unit}"
    if self.total:
      out += f" ({100.0 * done / self.total:.1f}%)"
    out += f", {rate:,.1f} {self.unit}/s"
    if self.total and rate > 0:
      out += f", ETA {format_duration(max(self.total - done, 0) / rate)}"
    return out

  def finish(self, done: Optional[int] = None) -> str:
    """Writes the closing line: how many, in how long, at what rate."""
    done = self.done if done is None else done
    seconds = self.clock() - self.start
    rate = done / seconds if seconds > 0 else 0.0
    line = (f"{self.what}: {done:,} {self.unit} in {seconds:.1f} s "
            f"({rate:,.1f} {self.unit}/s)")
    self.write(line)
    return line
