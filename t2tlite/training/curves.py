"""Learning curves read back from a run's TensorBoard event files, and plotted.

The trainer writes train scalars to `output_dir` and dev scalars to
`output_dir/eval` (see trainer.py); this module reads them back without
TensorBoard (the event files are TFRecords of Event protos) so
results pages can be regenerated from the runs themselves, and draws the
three panels a reader of docs/results.md wants: train loss, dev loss, and dev
BLEU (or exact match) against steps.
"""

import glob
import os
import re
from typing import Dict, Iterator, List, Sequence, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from t2tlite.errors import UserError

Curve = List[Tuple[int, float]]  # (step, value), sorted by step; the last write of a step wins.

PANELS = (("train", "loss", "train loss (label-smoothed)"),
          ("eval", "loss", "dev loss (label-smoothed)"),
          ("eval", ("bleu", "exact_match", "parse_f1"), "dev {metric} (decoded)"))


class CurvesError(UserError):
  """A run directory without event files; one line naming it."""


def event_files(log_dir: str) -> List[str]:
  """The event files directly in `log_dir`, oldest first (by modification time)."""
  return sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*")), key=os.path.getmtime)


def read_events(path: str) -> Iterator[tf.compat.v1.Event]:
  """The Event protos of one event file, in order, up to a record cut short or damaged.

  A run killed while its writer flushed leaves its last record cut short; TFRecord framing
  cannot be trusted past it, so the whole records before it are what the file holds (a
  warning names the file). Curves, plots and the resume's last logged step all read that.
  """
  try:
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
      yield tf.compat.v1.Event.FromString(record)
  except tf.errors.DataLossError as e:
    why = re.sub(r"\{\{.*?\}\}\s*", "", str(e)).strip().splitlines()[0][:200]  # Not TF's op name.
    logging.warning("%s: a record cut short or damaged (%s); the events before it are read, "
                    "none after", path, why)


def read_scalars(log_dir: str) -> Dict[str, Curve]:
  """{tag: [(step, value), ...]} from every event file directly in `log_dir`.

  A resumed run appends new event files and may rewrite steps it had logged
  before being killed; the value from the newest file wins, so a curve shows
  what the finished run computed.
  """
  values: Dict[str, Dict[int, float]] = {}
  for path in event_files(log_dir):
    for event in read_events(path):
      for value in event.summary.value:
        if value.HasField("tensor"):
          array = tf.make_ndarray(value.tensor)
          if array.size != 1 or not np.issubdtype(array.dtype, np.number):
            continue  # Text (the hparams) and other non-scalar summaries.
          number = float(array.reshape(()))
        elif value.HasField("simple_value"):
          number = float(value.simple_value)
        else:
          continue  # Text and histogram summaries.
        values.setdefault(value.tag, {})[int(event.step)] = number
  return {tag: sorted(steps.items()) for tag, steps in values.items()}


def read_run(output_dir: str) -> Dict[str, Dict[str, Curve]]:
  """{"train": scalars of output_dir, "eval": scalars of output_dir/eval}."""
  run = {"train": read_scalars(output_dir), "eval": read_scalars(os.path.join(output_dir, "eval"))}
  if not run["train"] and not run["eval"]:
    raise CurvesError(f"{output_dir}: no TensorBoard event files (is it a t2t-trainer output_dir?)")
  return run


def plot_runs(runs: Dict[str, Dict[str, Dict[str, Curve]]], png_path: str,
              title: str = "") -> List[str]:
  """Draws train loss, dev loss and dev BLEU / exact match of each named run into one PNG.

  Returns the panels drawn as "split/tag" (a panel no run has is left out).
  """
  import matplotlib
  matplotlib.use("Agg")  # Files only: no display on servers.
  import matplotlib.pyplot as plt

  panels = []
  for split, tags, label in PANELS:
    tags = (tags,) if isinstance(tags, str) else tags
    for tag in tags:
      if any(run[split].get(tag) for run in runs.values()):
        panels.append((split, tag, label.format(metric=tag.replace("_", " "))))
        break
  if not panels:
    raise CurvesError("no train loss, dev loss or dev BLEU in the runs given")
  figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
  for axis, (split, tag, label) in zip(axes[0], panels):
    for name, run in runs.items():
      curve = run[split].get(tag)
      if curve:
        steps, values = np.array(curve).T
        axis.plot(steps, values, marker="o" if len(curve) < 30 else None, markersize=3,
                  label=name)
    axis.set_title(label, fontsize=10)
    axis.set_xlabel("step")
    axis.grid(alpha=0.3)
    if len(runs) > 1:
      axis.legend(fontsize=8)
  if title:
    figure.suptitle(title, fontsize=11)
  figure.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(png_path)), exist_ok=True)
  figure.savefig(png_path, dpi=110)
  plt.close(figure)
  return [f"{split}/{tag}" for split, tag, _ in panels]


def parse_run_flags(specs: Sequence[str]) -> Dict[str, str]:
  """["name=dir", "dir", ...] -> {name: dir}; a bare dir is named by its basename."""
  runs = {}
  for spec in specs:
    name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
    runs[name or os.path.basename(os.path.normpath(path))] = path
  return runs
