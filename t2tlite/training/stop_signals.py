"""Ctrl-C and SIGTERM stop training after the step in flight, with that step saved.

Without this, either signal killed the trainer mid-step: the run resumed from its
last periodic checkpoint (up to --save_checkpoints_steps of work lost) and Ctrl-C
printed a Python traceback. Batch schedulers (Slurm, Kubernetes) send SIGTERM some
time before they kill a job, so a preempted run keeps its work this way. The first
signal only asks the loop to stop; its handler is then put back as it was, so a
second Ctrl-C interrupts at once. A signal the process was started ignoring stays
ignored (a background job of a non-interactive shell ignores SIGINT). With several
workers, a signal to any one of them stops them all after the same step
(StopCheck with distribution.StopAgreement); without this, TensorFlow's multi-worker
runtime swallowed SIGTERM and the worker trained on.
"""

import signal
import threading
from typing import Callable, Optional, Tuple

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(Exception):
  """Training stopped on a signal after saving; commands exit with 128 + its number."""

  def __init__(self, signum: int, step: int, checkpoint: str):
    self.exit_status = 128 + signum
    super().__init__(f"stopped by {signal.Signals(signum).name} at step {step}, saved "
                     f"{checkpoint}: the same command resumes from it")


class StopSignals:
  """A context manager; `received` is the first signal's number while inside, else None."""

  def __init__(self):
    # signal.signal works in the main thread only: a trainer run from another thread keeps
    # the handlers it found.
    self.enabled = threading.current_thread() is threading.main_thread()
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


class StopCheck:
  """When the training loop ends: a stop signal, early stopping, or --train_seconds spent.

  The last two are the chief's verdicts (`out_of_patience()`, `out_of_time()`; the
  other workers pass constant False). `agreement(signum, out_of_patience, out_of_time)
  -> the same, as all workers see them` (several workers: distribution.StopAgreement)
  shares each worker's view, so every worker ends after the same step, for the same
  reason. A signal is then seen only when the workers check together (`now()`), never in
  the middle of a dev evaluation they all take part in.
  """

  def __init__(self, signals: StopSignals, out_of_patience: Callable[[], bool],
               out_of_time: Callable[[], bool],
               agreement: Optional[Callable[..., Tuple[Optional[int], bool, bool]]] = None):
    self._signals = signals
    self._verdicts = (out_of_patience, out_of_time)
    self._agreement = agreement
    self._agreed_signal: Optional[int] = None
    self.out_of_patience = self.out_of_time = False
    self._stopped = False

  @property
  def signal(self) -> Optional[int]:
    """The signal that stops the run: this process's, or (several workers) any worker's."""
    return self._signals.received if self._agreement is None else self._agreed_signal

  def signalled(self) -> bool:
    return self.signal is not None

  def now(self) -> bool:
    """Whether the loop ends before another step; with several workers, a collective call."""
    if not self._stopped:  # Once decided, for good: every worker decided at the same call.
      out_of_patience, out_of_time = self._verdicts
      self.out_of_patience = out_of_patience()
      self.out_of_time = not self.out_of_patience and out_of_time()  # Logs when it is.
      if self._agreement is not None:
        self._agreed_signal, self.out_of_patience, self.out_of_time = self._agreement(
            self._signals.received, self.out_of_patience, self.out_of_time)
      self._stopped = self.out_of_patience or self.out_of_time or self.signalled()
    return self._stopped
