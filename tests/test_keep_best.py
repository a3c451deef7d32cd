"""--keep_best and --early_stopping_patience: on a tiny run whose dev metric is scripted.

`Trainer.dev_metrics` is replaced by a script {step: value}, so the test
decides when the metric improves; it also records the weights' checksum at
each evaluation, the truth the kept checkpoint is compared with.
"""

import json
import logging
import os

import pytest

from t2tlite.training import checkpoint_manifest, checkpoints, keep_best, run_dir
from t2tlite.training.keep_best import BestKeeper, BestKeeperError
from t2tlite.training.options import KEEP_BEST_METRICS, TrainOptions, TrainOptionsError
from t2tlite.training.trainer import Trainer
from tests.helpers import tiny_trainer

# Evaluations every 2 steps. Best 12.0 at step 4; 6, 8 (equal is no better) and 10 do not improve.
SCRIPT = {2: 10.0, 4: 12.0, 6: 11.0, 8: 12.0, 10: 9.0, 12: 8.0, 14: 13.0}


@pytest.fixture
def scripted(monkeypatch):
  """Trainer.dev_metrics follows SCRIPT (bleu); returns {step: weights checksum} seen."""
  seen = {}

  def dev_metrics(trainer, stopping=None):
    seen[trainer.step] = checkpoints.weights_checksum(trainer.model)
    return {"loss": 1.0, "bleu": SCRIPT[trainer.step]}
  monkeypatch.setattr(Trainer, "dev_metrics", dev_metrics)
  return seen


def trainer(directory, steps, patience):
  return tiny_trainer(directory, steps, eval_every=2, save_checkpoints_steps=2,
                      keep_checkpoint_max=2, keep_best="bleu", early_stopping_patience=patience)


def best_state(directory):
  with open(os.path.join(directory, "best", "best.json")) as f:
    return json.load(f)


def kept_checksum(directory, step):
  """The checksum of best/ckpt-<step> loaded into the run's model, as t2t-decoder loads it."""
  prefix = os.path.join(directory, "best", f"ckpt-{step}")
  assert checkpoint_manifest.verify(prefix) == ("ok", "")
  model, _ = run_dir.load_model(str(directory), prefix)
  return checkpoints.weights_checksum(model)


def test_best_kept_early_stop_and_both_survive_a_resume(tmp_path, scripted, caplog, request):
  caplog.set_level(logging.INFO)
  # absl's logger has its own level (WARNING unless an absl app set --verbosity in this
  # worker) and stops propagating to the root once an absl app ran in this process.
  caplog.set_level(logging.INFO, logger="absl")
  absl_logger = logging.getLogger("absl")
  absl_logger.addHandler(caplog.handler)
  request.addfinalizer(lambda: absl_logger.removeHandler(caplog.handler))
  run = tmp_path / "run"
  first = trainer(run, 20, patience=3)
  first.train()
  assert first.step == 10  # Evaluations at 6, 8 and 10 did not improve on step 4.
  assert "early stopping: dev bleu has not improved for 3 evaluations" in caplog.text
  state = best_state(run)
  assert (state["metric"], state["value"], state["step"], state["checkpoint"]) == (
      "bleu", 12.0, 4, "ckpt-4")
  assert state["evaluations_since_best"] == 3
  # Rotation (keep 2) removed the run's ckpt-4; best/ holds it, and only it.
  assert not os.path.exists(run / "ckpt-4.index")
  assert sorted(os.listdir(run / "best")) == sorted(
      ["best.json", "ckpt-4.index", "ckpt-4.data-00000-of-00001", "ckpt-4.manifest.json"])
  assert kept_checksum(run, 4) == scripted[4]

  # Rerun with the same flags: out of patience, nothing to train.
  caplog.clear()
  again = trainer(run, 20, patience=3)
  again.train()
  assert again.step == 10 and "nothing to train" in caplog.text

  # More patience: the count goes on from 3 (step 12 makes 4), then step 14 improves.
  caplog.clear()
  more = trainer(run, 14, patience=5)
  more.train()
  assert more.step == 14
  assert "dev bleu 8.0000 at step 12: no better than 12.0000 at step 4 (4 evaluation(s)" in (
      caplog.text)
  state = best_state(run)
  assert (state["value"], state["step"], state["evaluations_since_best"]) == (13.0, 14, 0)
  assert not os.path.exists(run / "best" / "ckpt-4.index")  # The previous best is replaced.
  assert kept_checksum(run, 14) == scripted[14]



def fake_writer(written):
  def write(prefix):
    written.append(os.path.basename(prefix))
    with open(prefix + ".index", "wb") as f:
      f.write(prefix.encode())
  return write


def test_lower_is_better_for_loss_and_replayed_steps_are_not_counted(tmp_path):
  written = []
  keeper = BestKeeper(str(tmp_path), "loss", 2, fake_writer(written))
  assert keeper.observe(10, {"loss": 2.0}) and keeper.observe(20, {"loss": 1.5})
  assert not keeper.observe(30, {"loss": 1.7})
  assert not keeper.observe(20, {"loss": 9.0})  # A resume replaying step 20: not counted.
  assert keeper.state["evaluations_since_best"] == 1 and not keeper.out_of_patience
  assert not keeper.observe(40, {"bleu": 3.0})  # No loss reported: not counted either.
  assert not keeper.observe(50, {"loss": 1.5})
  assert keeper.out_of_patience and written == ["ckpt-10", "ckpt-20"]
  assert checkpoint_manifest.list_checkpoints(str(tmp_path / "best")) == [
      str(tmp_path / "best" / "ckpt-20")]
  with pytest.raises(BestKeeperError, match=r"--keep_best=bleu but .*best holds the best by "
                     "loss; rerun with --keep_best=loss or move it aside"):
    BestKeeper(str(tmp_path), "bleu", 0, fake_writer([]))


def test_a_kill_mid_update_leaves_best_json_naming_a_complete_checkpoint(tmp_path):
  keeper = BestKeeper(str(tmp_path), "bleu", 0, fake_writer([]))
  keeper.observe(10, {"bleu": 5.0})
  # Killed after writing a better checkpoint, before best.json named it.
  fake_writer([])(str(tmp_path / "best" / "ckpt-20"))
  with open(tmp_path / "best" / "best.json.incomplete", "w") as f:
    f.write("{")
  reopened = BestKeeper(str(tmp_path), "bleu", 0, fake_writer([]))
  assert reopened.state["checkpoint"] == "ckpt-10"
  assert sorted(os.listdir(tmp_path / "best")) == [
      "best.json", "ckpt-10.index", "ckpt-10.manifest.json"]
  with open(tmp_path / "best" / "best.json", "w") as f:
    f.write("{not json")
  with pytest.raises(BestKeeperError, match="best.json: unreadable"):
    BestKeeper(str(tmp_path), "bleu", 0, fake_writer([]))


def test_options_are_checked():
  assert set(KEEP_BEST_METRICS) == set(keep_best.METRICS)
  with pytest.raises(TrainOptionsError, match="--keep_best=blue: must be one of bleu, loss, "
                     "parse_f1"):
    TrainOptions(keep_best="blue")
  with pytest.raises(TrainOptionsError, match="--early_stopping_patience=3: needs "
                     "--keep_best=METRIC"):
    TrainOptions(early_stopping_patience=3)
  with pytest.raises(TrainOptionsError,
                     match="--early_stopping_patience=2: needs --eval_every > 0"):
    TrainOptions(early_stopping_patience=2, keep_best="loss", eval_every=0)
  with pytest.raises(TrainOptionsError, match="--early_stopping_patience=-1: must be >= 0"):
    TrainOptions(early_stopping_patience=-1, keep_best="loss")


def _brute_force_best(seen, keep, sign):
  """The `keep` best (step, value) of `seen` in order: better first, ties by the earlier step."""
  return sorted(seen, key=lambda sv: (-sign * sv[1], sv[0]))[:keep]


@pytest.mark.parametrize("metric", ["loss", "bleu"])
def test_the_n_best_are_kept_as_a_brute_force_ranking_says(tmp_path, metric):
  import random
  rng = random.Random(7)
  sign = keep_best.METRICS[metric]
  values = [round(rng.uniform(1.0, 3.0), 1) for _ in range(40)]  # 21 values: many ties.
  keeper = BestKeeper(str(tmp_path), metric, 0, fake_writer([]), keep=4)
  seen, since = [], 0
  for i, value in enumerate(values):
    step = 10 * (i + 1)
    improved = keeper.observe(step, {metric: value})
    best_before = max((v for _, v in seen), key=lambda v: sign * v, default=None)
    assert improved == (best_before is None or sign * (value - best_before) > 0)
    since = 0 if improved else since + 1
    seen.append((step, value))
    expected = _brute_force_best(seen, 4, sign)
    state = best_state(tmp_path)
    assert [(e["step"], e["value"]) for e in state["kept"]] == expected
    assert (state["step"], state["value"]) == expected[0]
    assert state["evaluations_since_best"] == since
    assert checkpoint_manifest.list_checkpoints(str(tmp_path / "best")) == [
        str(tmp_path / "best" / f"ckpt-{s}") for s, _ in sorted(expected)]
    assert keep_best.kept_checkpoints(str(tmp_path)) == (metric, [
        (str(tmp_path / "best" / f"ckpt-{s}"), v) for s, v in expected])

  # A resume keeping fewer trims best/ to the better ones; one keeping as many changes nothing.
  BestKeeper(str(tmp_path), metric, 0, fake_writer([]), keep=4)
  assert [e["step"] for e in best_state(tmp_path)["kept"]] == [s for s, _ in expected]
  BestKeeper(str(tmp_path), metric, 0, fake_writer([]), keep=2)
  assert [e["step"] for e in best_state(tmp_path)["kept"]] == [s for s, _ in expected[:2]]
  assert checkpoint_manifest.list_checkpoints(str(tmp_path / "best")) == [
      str(tmp_path / "best" / f"ckpt-{s}") for s, _ in sorted(expected[:2])]


def test_a_best_json_written_before_several_were_kept_names_its_best(tmp_path):
  os.makedirs(tmp_path / "best")
  fake_writer([])(str(tmp_path / "best" / "ckpt-20"))
  checkpoint_manifest.write_manifest(str(tmp_path / "best" / "ckpt-20"))
  with open(tmp_path / "best" / "best.json", "w") as f:
    json.dump({"metric": "loss", "value": 1.5, "step": 20, "checkpoint": "ckpt-20",
               "evaluations_since_best": 1, "last_evaluated_step": 30}, f)
  assert keep_best.kept_checkpoints(str(tmp_path)) == (
      "loss", [(str(tmp_path / "best" / "ckpt-20"), 1.5)])
  keeper = BestKeeper(str(tmp_path), "loss", 0, fake_writer([]), keep=2)
  assert not keeper.observe(40, {"loss": 1.7})  # Second best: kept beside it, no improvement.
  assert [(e["step"], e["value"]) for e in best_state(tmp_path)["kept"]] == [(20, 1.5), (40, 1.7)]
  assert keep_best.kept_checkpoints(str(tmp_path / "none")) == (None, [])


def test_average_best_n_options_are_checked():
  with pytest.raises(TrainOptionsError, match="--average_best_n=4: needs --keep_best=METRIC"):
    TrainOptions(average_best_n=4)
  with pytest.raises(TrainOptionsError, match="--average_best_n=4: needs --eval_every > 0"):
    TrainOptions(average_best_n=4, keep_best="loss", eval_every=0)
  with pytest.raises(TrainOptionsError, match="--average_best_n=-1: must be >= 0"):
    TrainOptions(average_best_n=-1, keep_best="loss")
