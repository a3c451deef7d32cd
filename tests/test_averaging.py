"""Checkpoint averaging: the numpy mean, loadable like any checkpoint, invisible to resume."""

import json
import os
import shutil

import numpy as np
import pytest

from t2tlite.training import averaging, checkpoint_manifest, run_dir
from tests.helpers import checkpoint_key, checkpoint_values, one_line_error, run, tiny_trainer


@pytest.fixture
def run_copy(tiny_run, tmp_path):
  """A copy to change: the checkpoint state file holds relative paths, so it moves."""
  return shutil.copytree(tiny_run.output_dir, str(tmp_path / "run"))


def _means(output_dir, steps):
  """The numpy mean of each float model weight over ckpt-<step> for `steps`."""
  values = [checkpoint_values(os.path.join(output_dir, f"ckpt-{s}")) for s in steps]
  return {k: np.mean(np.stack([v[k] for v in values]).astype(np.float64), axis=0).astype(
      values[0][k].dtype) for k in values[0] if values[0][k].dtype.kind == "f"}


def test_trainer_option_writes_the_average_of_the_last_n(tiny_run):
  """The session's tiny run was trained with average_last_n=3."""
  last3, last = tiny_run.steps[-3:], tiny_run.steps[-1]
  path = averaging.averaged_path(tiny_run.output_dir, last)
  assert path == os.path.join(tiny_run.output_dir, "averaged", f"ckpt-{last}")
  assert os.path.exists(path + ".index")
  record = json.load(open(path + ".json"))
  assert record == {"n": 3, "checkpoints": [f"ckpt-{s}" for s in last3], "steps": last3}
  assert averaging.averaged_steps(path) == last3  # The reader beside the writer.


def test_averaged_steps_refuses_a_missing_or_foreign_json_by_name(tmp_path):
  prefix = str(tmp_path / "ckpt-5")
  with pytest.raises(run_dir.RunDirError, match="ckpt-5.json: missing"):
    averaging.averaged_steps(prefix)
  (tmp_path / "ckpt-5.json").write_text('{"n": 3}')
  with pytest.raises(run_dir.RunDirError, match="ckpt-5.json: no list of averaged steps"):
    averaging.averaged_steps(prefix)


def test_averaged_weights_equal_the_numpy_mean(tiny_run):
  run, last3 = tiny_run.output_dir, tiny_run.steps[-3:]
  averaged = checkpoint_values(averaging.averaged_path(run, last3[-1]))
  averaged_ones = [checkpoint_values(os.path.join(run, f"ckpt-{s}")) for s in last3]
  newest = averaged_ones[-1]
  assert set(averaged) == set(newest)  # Every model variable, no optimizer slot or iterator.
  means = _means(run, last3)
  assert means and all(v.dtype == np.float32 for v in means.values())
  for key, mean in means.items():
    np.testing.assert_array_equal(averaged[key], mean, err_msg=key)
    # Every weight moved between those checkpoints, so no single one of them is the average
    # (averaging one checkpoint, or the wrong ones, fails here or above).
    for one in averaged_ones:
      assert not np.array_equal(averaged[key], one[key]), key
  rng_keys = set(averaged) - set(means)
  assert rng_keys and all("rng_state" in k for k in rng_keys)
  for key in rng_keys:  # A mean of RNG states is no state: the newest's are kept.
    np.testing.assert_array_equal(averaged[key], newest[key], err_msg=key)


def test_load_model_restores_the_averaged_weights(tiny_run):
  run, last3 = tiny_run.output_dir, tiny_run.steps[-3:]
  path = averaging.averaged_path(run, last3[-1])
  model, loaded = run_dir.load_model(run, path)
  assert loaded == path
  means = _means(run, last3)
  assert len(model.weights) == len(means)
  for w in model.weights:
    np.testing.assert_array_equal(w.numpy(), means[checkpoint_key(w)], err_msg=w.path)
  assert run_dir.load_model(run)[1] == os.path.join(run, f"ckpt-{last3[-1]}")  # Still the latest.


def test_existing_average_is_refused_kept_or_overwritten(tiny_run, run_copy):
  last2 = tiny_run.steps[-2:]
  with pytest.raises(run_dir.RunDirError,
                     match=rf"averaged/ckpt-{last2[-1]} exists; pass --overwrite"):
    averaging.average_checkpoints(run_copy, 2)
  existing = averaging.averaged_path(run_copy, last2[-1])
  before = checkpoint_values(existing)
  assert averaging.average_checkpoints(run_copy, 2, keep_existing=True) == existing
  assert json.load(open(existing + ".json"))["steps"] == tiny_run.steps[-3:]  # The trainer's.
  for key, value in checkpoint_values(existing).items():
    np.testing.assert_array_equal(value, before[key], err_msg=key)
  path = averaging.average_checkpoints(run_copy, 2, overwrite=True)
  assert json.load(open(path + ".json"))["steps"] == last2
  averaged = checkpoint_values(path)
  for key, mean in _means(run_copy, last2).items():
    np.testing.assert_array_equal(averaged[key], mean, err_msg=key)


@pytest.mark.slow  # Minutes of training or datagen; CI covers the kind elsewhere.
def test_training_resumes_from_its_own_checkpoint_not_the_average(tiny_run, run_copy):
  last = tiny_run.steps[-1]
  every = tiny_run.options()["save_checkpoints_steps"]
  resumed = tiny_trainer(run_copy, last + every, **dict(tiny_run.options(), average_last_n=2))
  assert resumed.restore() == last
  assert resumed.manager.latest_checkpoint == os.path.join(run_copy, f"ckpt-{last}")
  own, averaged = (checkpoint_values(os.path.join(run_copy, f"ckpt-{last}")),
                   checkpoint_values(averaging.averaged_path(run_copy, last)))
  for w in resumed.model.weights:
    np.testing.assert_array_equal(w.numpy(), own[checkpoint_key(w)], err_msg=w.path)
  assert any(not np.array_equal(own[checkpoint_key(w)], averaged[checkpoint_key(w)])
             for w in resumed.model.weights)

  resumed.train()
  assert ([checkpoint_manifest.step_of(p) for p in resumed.manager.checkpoints][-3:]
          == tiny_run.steps[-2:] + [last + every])
  assert os.path.exists(averaging.averaged_path(run_copy, last) + ".index")  # Never swept.
  path = averaging.averaged_path(run_copy, last + every)
  assert json.load(open(path + ".json"))["steps"] == [last, last + every]
  written = os.stat(path + ".index").st_mtime_ns
  resumed.train()  # A rerun of the finished run keeps the average it made.
  assert os.stat(path + ".index").st_mtime_ns == written


def test_cli_prints_the_checkpoint_and_averages_all_when_n_exceeds_them(tiny_run, run_copy):
  proc = run("t2t-avg-all", f"--output_dir={run_copy}", "--n=50", "--overwrite")
  path = averaging.averaged_path(run_copy, tiny_run.steps[-1])
  assert proc.stdout.splitlines() == [path]
  assert f"holds {len(tiny_run.steps)} checkpoints, fewer than n=50" in proc.stderr
  assert json.load(open(path + ".json"))["steps"] == tiny_run.steps


def test_cli_user_errors_are_one_line(tmp_path):
  one_line_error(run("t2t-avg-all", f"--output_dir={tmp_path / 'nope'}", check=False),
                 "no such directory")
  one_line_error(run("t2t-avg-all", f"--output_dir={tmp_path}", check=False),
                 "no checkpoint found")


def test_named_steps_average_to_their_numpy_mean_where_asked(tiny_run, tmp_path):
  """A window chosen after the run: every other checkpoint, not the last N."""
  run_dir_, chosen = tiny_run.output_dir, tiny_run.steps[-7::3]  # Three, two apart.
  assert len(chosen) == 3 and chosen[-1] == tiny_run.steps[-1]
  target = str(tmp_path / "windows" / f"ckpt-{chosen[-1]}")
  named = ",".join(str(step) for step in chosen[::-1])  # In any order.
  proc = run("t2t-avg-all", f"--output_dir={run_dir_}", f"--steps={named}",
             f"--output_path={target}")
  assert proc.stdout.splitlines() == [target]
  assert json.load(open(target + ".json")) == {
      "n": 3, "checkpoints": [f"ckpt-{s}" for s in chosen], "steps": chosen}
  averaged = checkpoint_values(target)
  means = _means(run_dir_, chosen)
  for key, mean in means.items():
    np.testing.assert_array_equal(averaged[key], mean, err_msg=key)
  newest = checkpoint_values(os.path.join(run_dir_, f"ckpt-{chosen[-1]}"))
  for key in set(averaged) - set(means):  # RNG states: the newest named checkpoint's.
    np.testing.assert_array_equal(averaged[key], newest[key], err_msg=key)
  model, loaded = run_dir.load_model(run_dir_, target)  # As t2t-decoder loads it.
  assert loaded == target
  for w in model.weights:
    np.testing.assert_array_equal(w.numpy(), means[checkpoint_key(w)], err_msg=w.path)
  # Another window is not the last 3, so the two averages differ.
  last3 = checkpoint_values(averaging.averaged_path(run_dir_, chosen[-1]))
  assert any(not np.array_equal(last3[k], averaged[k]) for k in means)

  with pytest.raises(run_dir.RunDirError, match="exists; pass --overwrite"):
    averaging.average_steps(run_dir_, chosen[:2], target)
  averaging.average_steps(run_dir_, chosen[:2], target, overwrite=True)
  assert json.load(open(target + ".json"))["steps"] == chosen[:2]


def test_named_steps_refuse_what_would_mix_or_mislead(tiny_run, tmp_path):
  run_dir_, steps = tiny_run.output_dir, tiny_run.steps
  ok = str(tmp_path / "w" / "ckpt-1")
  absent = steps[-1] + 1
  with pytest.raises(run_dir.RunDirError,
                     match=rf"holds no checkpoint of step {absent} \(it holds {steps[0]}, "):
    averaging.average_steps(run_dir_, [steps[-1], absent], ok)
  with pytest.raises(run_dir.RunDirError, match=f"step {steps[-1]} named twice"):
    averaging.average_steps(run_dir_, [steps[-1], steps[-2], steps[-1]], ok)
  for where, owner in (("", "the run's own checkpoints"), ("averaged", "the trainer's averaged/"),
                       ("averaged_best", "the trainer's averaged_best/"),
                       ("best", "the trainer's best/")):
    inside = os.path.join(run_dir_, where, "ckpt-99")
    with pytest.raises(run_dir.RunDirError, match=f"would sit among {owner}"):
      averaging.average_steps(run_dir_, steps[-2:], inside)
  for directory in (str(tmp_path) + os.sep, str(tmp_path)):
    with pytest.raises(run_dir.RunDirError, match="names a directory"):
      averaging.average_steps(run_dir_, steps[-2:], directory)
  assert not os.path.exists(os.path.join(run_dir_, "ckpt-99.index"))
  assert not os.path.exists(ok + ".index")


def test_named_steps_cli_user_errors_are_one_line(tiny_run, tmp_path):
  base = [f"--output_dir={tiny_run.output_dir}"]
  out = f"--output_path={tmp_path / 'w' / 'ckpt-1'}"
  for args, fragment in (
      (["--steps=20,40", "--best", out], "drop --best"),
      (["--steps=20,40"], "--output_path=DIR/ckpt-N"),
      ([out], "--output_path: only with --steps"),
      (["--steps=20,forty", out], "--steps=20,forty: a comma-separated list of steps")):
    # Each fails before TensorFlow loads (a fraction of a second); a missing step is the
    # library's error (above), which the CLI prints as every RunDirError.
    one_line_error(run("t2t-avg-all", *base, *args, check=False), fragment)


# Dev loss by step for the best-N run: the 3 best are steps 4, 8 and 12 (not the last 3).
BEST_SCRIPT = {2: 3.0, 4: 1.0, 6: 2.5, 8: 1.5, 10: 4.0, 12: 2.0, 14: 5.0}


def test_the_average_of_the_best_n_is_the_mean_of_the_weights_they_were_kept_with(
    tmp_path, monkeypatch):
  """--average_best_n=3: a scripted dev loss picks the checkpoints; the truth is the weights
  the model held at those evaluations, recorded as they happened."""
  from t2tlite.training.trainer import Trainer
  weights_at = {}

  def dev_metrics(trainer, stopping=None):
    weights_at[trainer.step] = {w.path: np.array(w.numpy()) for w in trainer.model.weights}
    return {"loss": BEST_SCRIPT[trainer.step]}
  monkeypatch.setattr(Trainer, "dev_metrics", dev_metrics)
  out = str(tmp_path / "run")
  tiny_trainer(out, 14, eval_every=2, save_checkpoints_steps=2, keep_checkpoint_max=2,
               keep_best="loss", average_best_n=3).train()
  assert not os.path.exists(os.path.join(out, "ckpt-4.index"))  # Rotated away; best/ kept it.
  path = averaging.averaged_path(out, 12, best=True)
  assert path == os.path.join(out, "averaged_best", "ckpt-12")
  assert json.load(open(path + ".json")) == {
      "n": 3, "checkpoints": ["best/ckpt-4", "best/ckpt-8", "best/ckpt-12"], "steps": [4, 8, 12],
      "metric": "loss", "values": [1.0, 1.5, 2.0]}
  model, _ = run_dir.load_model(out, path)
  floats = [w for w in model.weights if w.dtype.startswith("float")]
  assert floats
  for w in floats:
    mean = np.mean([weights_at[s][w.path].astype(np.float64) for s in (4, 8, 12)], axis=0)
    np.testing.assert_allclose(w.numpy(), mean.astype(np.float32), rtol=1e-6, atol=1e-7,
                               err_msg=w.path)
    assert not np.allclose(w.numpy(), weights_at[12][w.path]), w.path  # Not one of them alone.

  # The command averages the 2 best into their own checkpoint; the last-N average is apart.
  proc = run("t2t-avg-all", f"--output_dir={out}", "--n=2", "--best")
  assert proc.stdout.splitlines() == [averaging.averaged_path(out, 8, best=True)]
  assert json.load(open(proc.stdout.strip() + ".json"))["steps"] == [4, 8]
  one_line_error(run("t2t-avg-all", f"--output_dir={tmp_path}", "--best", check=False),
                 "no best checkpoints")
