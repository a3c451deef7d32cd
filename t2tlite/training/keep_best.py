"""The best checkpoints by a dev metric (`--keep_best`), and early stopping.

After each evaluation the trainer hands the dev metrics to `BestKeeper`:

- When the watched metric is among the `keep` best so far (higher is better
  for bleu, exact_match and parse_f1; lower for loss, nll and perplexity),
  the model's weights are written to `RUN/best/ckpt-<step>` (a model-only
  checkpoint, like `averaged/`, with its manifest), then `RUN/best/best.json`
  is replaced atomically, and only then is the checkpoint that fell out of
  the `keep` best deleted. best.json names the best (metric, value, step,
  checkpoint) and, under "kept", every checkpoint held, best first; it always
  names complete checkpoints, and a kill in between leaves an extra one that
  the next start removes. Checkpoint rotation never looks into `best/`.
- `keep` is 1 unless `--average_best_n=N` asks for the N best: averaging the
  checkpoints with the best dev metric, not the last ones, is what a run that
  over-fits before its time budget ends needs (the last N then sit past the
  best region), and keeping them here is what lets the average be taken after
  rotation has removed them from the run directory.
- `--early_stopping_patience=N`: training stops after N evaluations in a row
  without an improvement, saying so; the count is in best.json, so a resumed
  run goes on counting (and one already out of patience trains no further).
  An evaluation of a step at or before the last one counted (a resume
  replaying steps) is not counted again.
"""

import json
import os
from typing import List, NamedTuple, Optional, Tuple

from absl import logging

from t2tlite import files
from t2tlite.errors import UserError
from t2tlite.training import checkpoint_manifest

BEST_DIR = "best"
STATE_FILE = "best.json"
# Metric -> +1 when higher is better, -1 when lower is.
METRICS = {"bleu": 1, "exact_match": 1, "parse_f1": 1, "loss": -1, "nll": -1, "perplexity": -1}


class BestKeeperError(UserError):
  """best/ belongs to another metric, or its record is unreadable."""


def best_dir(output_dir: str) -> str:
  return os.path.join(output_dir, BEST_DIR)


def read_state(output_dir: str) -> Optional[dict]:
  """best/best.json, or None when there is none."""
  path = os.path.join(best_dir(output_dir), STATE_FILE)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      state = json.load(f)
    missing = {"metric", "value", "step", "checkpoint"} - set(state)
    if missing:
      raise ValueError(f"no {', '.join(sorted(missing))}")
  except (OSError, ValueError, TypeError) as e:
    raise BestKeeperError(f"{path}: unreadable ({e}); move {BEST_DIR}/ aside to start "
                          "keeping the best afresh") from None
  return state


class Kept(NamedTuple):
  """What best/ holds: its metric and (prefix, dev value) of each checkpoint, best first."""
  metric: Optional[str]
  checkpoints: List[Tuple[str, float]]


def kept_checkpoints(output_dir: str) -> Kept:
  """best/'s checkpoints, from one read of best.json; Kept(None, []) when there is no best/."""
  state = read_state(output_dir)
  if state is None:
    return Kept(None, [])
  return Kept(state["metric"], [(os.path.join(best_dir(output_dir), e["checkpoint"]), e["value"])
                                for e in _kept(state)])


class BestKeeper:
  """Tracks the best value of `metric` over evaluations; writes best/ on the chief only.

  `save_weights(prefix)` writes a model-only checkpoint at `prefix`
  (the trainer passes one over its model's weights).
  """

  def __init__(self, output_dir: str, metric: str, patience: int, save_weights,
               is_chief: bool = True, keep: int = 1):
    if keep < 1:
      raise ValueError(f"keep={keep}: keep at least the best checkpoint")
    self.output_dir = output_dir
    self.metric = metric
    self.patience = patience
    self.keep = keep
    self.sign = METRICS[metric]
    self._save_weights = save_weights
    self.is_chief = is_chief
    state = read_state(output_dir)
    if state and state["metric"] != metric:
      raise BestKeeperError(
          f"--keep_best={metric} but {best_dir(output_dir)} holds the best by "
          f"{state['metric']}; rerun with --keep_best={state['metric']} or move it aside")
    self.state = state or {"metric": metric, "value": None, "step": None, "checkpoint": None,
                           "evaluations_since_best": 0, "last_evaluated_step": -1}
    self.state["kept"] = _kept(self.state)
    dropped = self.state["kept"][keep:]  # A resume asking to keep fewer.
    del self.state["kept"][keep:]
    if self.is_chief:
      if dropped:
        self._write_state()
      self._remove_strays()
    if self.state["value"] is not None:
      logging.info("best dev %s so far: %.4f at step %d (%s), %d evaluation(s) since", metric,
                   self.state["value"], self.state["step"], self.state["checkpoint"],
                   self.state["evaluations_since_best"])

  @property
  def out_of_patience(self) -> bool:
    return bool(self.patience) and self.state["evaluations_since_best"] >= self.patience

  def stop_reason(self) -> str:
    s = self.state
    return (f"early stopping: dev {self.metric} has not improved for "
            f"{s['evaluations_since_best']} evaluations (--early_stopping_patience="
            f"{self.patience}); best {s['value']:.4f} at step {s['step']}, kept in "
            f"{os.path.join(best_dir(self.output_dir), s['checkpoint'] or '')}")

  def observe(self, step: int, metrics: dict) -> bool:
    """Counts the evaluation of `step`; keeps the weights if they are the best. True if improved."""
    if self.metric not in metrics:
      logging.warning("--keep_best=%s: no dev %s at step %d (metrics: %s); not counted",
                      self.metric, self.metric, step, ", ".join(sorted(metrics)) or "none")
      return False
    if step <= self.state["last_evaluated_step"]:
      return False  # Already counted before a resume replayed this step.
    value = float(metrics[self.metric])
    best = self.state["value"]
    improved = best is None or self.sign * (value - best) > 0
    kept = self.state["kept"]
    # Among the `keep` best: better than the worst kept (a tie keeps the earlier step).
    enters = len(kept) < self.keep or self.sign * (value - kept[-1]["value"]) > 0
    self.state["last_evaluated_step"] = step
    dropped = []
    if enters:
      name = f"ckpt-{step}"
      if self.is_chief:
        prefix = os.path.join(best_dir(self.output_dir), name)
        for stale in checkpoint_manifest.all_files(prefix):  # A kill before best.json named it.
          os.remove(stale)
        os.makedirs(best_dir(self.output_dir), exist_ok=True)
        self._save_weights(prefix)
        checkpoint_manifest.write_manifest(prefix)
      kept.append(_entry(step, value))
      kept.sort(key=lambda e: -self.sign * e["value"])  # Stable: equal values keep step order.
      dropped = kept[self.keep:]
      del kept[self.keep:]
    if improved:
      self.state.update(value=value, step=step, checkpoint=f"ckpt-{step}",
                        evaluations_since_best=0)
      logging.info("dev %s %.4f at step %d: the best so far, kept in %s", self.metric, value,
                   step, os.path.join(best_dir(self.output_dir), f"ckpt-{step}"))
    else:
      self.state["evaluations_since_best"] += 1
      logging.info("dev %s %.4f at step %d: no better than %.4f at step %d (%d evaluation(s) "
                   "without improvement%s)%s", self.metric, value, step, best,
                   self.state["step"], self.state["evaluations_since_best"],
                   f", patience {self.patience}" if self.patience else "",
                   f"; among the {self.keep} best, kept" if enters else "")
    if self.is_chief:
      self._write_state()
      for entry in dropped:
        for path in checkpoint_manifest.all_files(
            os.path.join(best_dir(self.output_dir), entry["checkpoint"])):
          os.remove(path)
    return improved

  def _write_state(self) -> None:
    path = os.path.join(best_dir(self.output_dir), STATE_FILE)
    with files.atomic_write(path) as f:
      json.dump(self.state, f, indent=2, sort_keys=True)
      f.write("\n")

  def _remove_strays(self) -> None:
    """Checkpoints in best/ that best.json does not name: left by a kill mid-update."""
    directory = best_dir(self.output_dir)
    files.remove_incomplete(directory)
    names = {e["checkpoint"] for e in self.state["kept"]}
    for prefix in checkpoint_manifest.list_checkpoints(directory):
      if os.path.basename(prefix) not in names:
        for path in checkpoint_manifest.all_files(prefix):
          os.remove(path)
        logging.info("removed %s, left by an interrupted update of %s", prefix, directory)


def _kept(state: dict) -> List[dict]:
  """best.json's kept list; one written before several were kept names the best alone."""
  if "kept" in state:
    return state["kept"]
  return [_entry(state["step"], state["value"])] if state["checkpoint"] else []


def _entry(step: int, value: float) -> dict:
  return {"step": step, "value": value, "checkpoint": f"ckpt-{step}"}
