"""Ctrl-C and SIGTERM stop training after the step in flight, with that step saved.

Without this, either signal killed the trainer mid-step: the run resumed from its
last periodic checkpoint (up to --save_checkpoints_steps of work lost) and Ctrl-C
printed a Python traceback. Batch schedulers (Slurm, Kubernetes) send SIGTERM some
time before they kill a job, so a preempted run keeps its work this way. The first
signal only asks the loop to stop; its handler is then put back as it was, so a
second Ctrl-C interrupts at once. A signal the process was started ignoring stays
ignored (a background job of a non-interactive shell ignores SIGINT). Multi-worker
runs keep the default: every worker would have to agree on the step to save.
"""

import signal
import threading
from typing import Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(Exception):
  """Training stopped on a signal after saving; commands exit with 128 + its number."""

  def __init__(self, signum: int, step: int, checkpoint: str):
    self.exit_status = 128 + signum
    super().__init__(f"stopped by {signal.Signals(signum).name} at step {step}, saved "
                     f"{checkpoint}: the same command resumes from it")


class StopSignals:
  """A context manager; `received` is the first signal's number while inside, else None."""

  def __init__(self, enabled: bool = True):
    self.enabled = enabled and threading.current_thread() is threading.main_thread()
    self.received: Optional[int] = None
    self._previous = {}

  def __enter__(self):
    if self.enabled:
      for signum in SIGNALS:
        previous = signal.getsignal(signum)
        if previous is not signal.SIG_IGN:
          self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame  # Unused: the loop checks `received` between steps.
    self.received = signum
    signal.signal(signum, self._previous[signum])  # A second one acts as it did before.

  def __exit__(self, *exc_info):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}
    return False
