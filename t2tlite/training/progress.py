"""Metric accumulation between log lines, the progress line, and where scalars are written.

Scalars go to TensorBoard (tf.summary, which also works in a JAX-backend
process when TensorFlow is installed); where TensorFlow is not installed,
to `scalars.csv` in the same directory (`CsvScalarWriter`).
"""

import csv
import math
import os
import time

from t2tlite.progress import format_duration  # noqa: F401 (also used by callers)


class MetricWindow:
  """Sums step metrics over a logging window; reports averages per token/sequence."""

  def __init__(self):
    self.reset()

  def reset(self):
    self.sums = None
    self.steps = 0
    self.start = time.perf_counter()

  def add(self, metrics):
    """Adds one step's sums (tensors stay on device until `result`)."""
    self.sums = dict(metrics) if self.sums is None else {
        k: self.sums[k] + v for k, v in metrics.items()}
    self.steps += 1

  def result(self):
    """loss, nll, perplexity, accuracy, sequence_accuracy, tokens, seconds[, grad_norm]."""
    sums = {k: float(v) for k, v in self.sums.items()}
    tokens = max(sums["tokens"], 1.0)
    nll = sums["nll"] / tokens
    out = {
        "loss": sums["loss"] / tokens, "nll": nll, "perplexity": math.exp(min(nll, 50.0)),
        "accuracy": sums["correct"] / tokens,
        "sequence_accuracy": sums["correct_sequences"] / max(sums["sequences"], 1.0),
        "tokens": sums["tokens"], "seconds": time.perf_counter() - self.start,
    }
    if "grad_norm" in sums:  # A per-step value: averaged over the window's steps.
      out["grad_norm"] = sums["grad_norm"] / self.steps
    return out


def progress_line(step, total, metrics, learning_rate, steps_in_window,
                  seconds_left=None) -> str:
  """One stderr line: step, loss, nll, ppl, accuracy, lr, grad norm, tokens/s, ETA.

  The ETA is the time to `total` steps at the window's pace, or `seconds_left`
  (a time budget) when that ends the run sooner.
  """
  seconds = metrics["seconds"]
  per_step = seconds / max(steps_in_window, 1)
  eta = per_step * (total - step)
  if seconds_left is not None:
    eta = min(eta, max(seconds_left, 0.0))
  return (f"step {step}/{total} | loss {metrics['loss']:.4f} nll {metrics['nll']:.4f} "
          f"ppl {metrics['perplexity']:.2f} acc {metrics['accuracy']:.3f} | "
          f"lr {learning_rate:.3g} gnorm {metrics.get('grad_norm', 0.0):.3f} | "
          f"{metrics['tokens'] / max(seconds, 1e-9):,.0f} tok/s {per_step:.3f} s/step | "
          f"ETA {format_duration(eta)}")


class CsvScalarWriter:
  """Rows "step,name,value" appended to DIR/scalars.csv: TensorBoard's scalars, in plain text.

  The header is written with the first row; each write is flushed, so a
  killed run keeps every row it logged (a torn last line is skipped on read).
  """

  FILE = "scalars.csv"

  def __init__(self, directory: str):
    os.makedirs(directory, exist_ok=True)
    self.path = os.path.join(directory, self.FILE)

  def write(self, step: int, scalars: dict) -> None:
    new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
    with open(self.path, "a", newline="") as f:
      out = csv.writer(f)
      if new:
        out.writerow(["step", "name", "value"])
      for name, value in scalars.items():
        out.writerow([int(step), name, repr(float(value))])

  def rows(self):
    """[(step, name, value)] of every complete row."""
    if not os.path.exists(self.path):
      return []
    out = []
    with open(self.path, newline="") as f:
      for row in csv.reader(f):
        try:
          out.append((int(row[0]), row[1], float(row[2])))
        except (ValueError, IndexError):  # The header, or a line a kill cut short.
          continue
    return out

  def last_step(self) -> int:
    """The highest step with a row (-1: none), like resume.last_logged_step for events."""
    return max((step for step, _, _ in self.rows()), default=-1)


def write_scalars(writer, step, scalars):
  if isinstance(writer, CsvScalarWriter):
    writer.write(step, scalars)
    return
  import tensorflow as tf
  with writer.as_default(step=step):
    for name, value in scalars.items():
      tf.summary.scalar(name, value)
  writer.flush()
