"""Checkpoint averaging: the numpy mean, loadable like any checkpoint, invisible to resume."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from t2tlite import registry
from t2tlite.training import averaging, run_dir
from t2tlite.training.trainer import Trainer, TrainOptions
from tests.test_cli import one_line_error, run
from tests.test_training import FAST, small_copy_problem

STEPS = [2, 4, 6, 8, 10, 12]  # Checkpoints of the module's run.


def _trainer(output_dir, steps, average_last_n):
  hp = registry.hparams("transformer_tiny").replace(**FAST)
  opts = TrainOptions(train_steps=steps, eval_every=0, eval_steps=2, eval_decode=False,
                      log_every=5, save_checkpoints_steps=2, save_checkpoints_secs=0,
                      average_last_n=average_last_n)
  return Trainer(small_copy_problem(), hp, str(output_dir), options=opts)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A finished 12-step run that averaged its last 3 checkpoints at the end."""
  output_dir = tmp_path_factory.mktemp("avg") / "run"
  _trainer(output_dir, 12, average_last_n=3).train()
  return str(output_dir)


@pytest.fixture
def run_copy(trained, tmp_path):
  """A copy to change: the checkpoint state file holds relative paths, so it moves."""
  return shutil.copytree(trained, str(tmp_path / "run"))


def _model_values(prefix):
  """{checkpoint key: value} of the model's variables, read without building a model."""
  reader = tf.train.load_checkpoint(prefix)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith("model/")}


def _means(output_dir, steps):
  """The numpy mean of each float model weight over ckpt-<step> for `steps`."""
  values = [_model_values(os.path.join(output_dir, f"ckpt-{s}")) for s in steps]
  return {k: np.mean(np.stack([v[k] for v in values]).astype(np.float64), axis=0).astype(
      values[0][k].dtype) for k in values[0] if values[0][k].dtype.kind == "f"}


def _key(weight):
  """The checkpoint key of a Keras weight (tf.train escapes "." and "/")."""
  escaped = weight.path.replace(".", "..").replace("/", ".S")
  return f"model/{escaped}/.ATTRIBUTES/VARIABLE_VALUE"


def test_trainer_option_writes_the_average_of_the_last_n(trained):
  path = averaging.averaged_path(trained, 12)
  assert path == os.path.join(trained, "averaged", "ckpt-12")
  assert os.path.exists(path + ".index")
  record = json.load(open(path + ".json"))
  assert record == {"n": 3, "checkpoints": ["ckpt-8", "ckpt-10", "ckpt-12"],
                    "steps": [8, 10, 12]}


def test_averaged_weights_equal_the_numpy_mean(trained):
  averaged = _model_values(averaging.averaged_path(trained, 12))
  newest = _model_values(os.path.join(trained, "ckpt-12"))
  assert set(averaged) == set(newest)  # Every model variable, no optimizer slot or iterator.
  means = _means(trained, [8, 10, 12])
  assert means and all(v.dtype == np.float32 for v in means.values())
  for key, mean in means.items():
    np.testing.assert_array_equal(averaged[key], mean, err_msg=key)
  assert sum(not np.array_equal(means[k], newest[k]) for k in means) > len(means) // 2
  rng_keys = set(averaged) - set(means)
  assert rng_keys and all("rng_state" in k for k in rng_keys)
  for key in rng_keys:  # A mean of RNG states is no state: the newest's are kept.
    np.testing.assert_array_equal(averaged[key], newest[key], err_msg=key)


def test_load_model_restores_the_averaged_weights(trained):
  path = averaging.averaged_path(trained, 12)
  model, loaded = run_dir.load_model(trained, path)
  assert loaded == path
  means = _means(trained, [8, 10, 12])
  assert len(model.weights) == len(means)
  for w in model.weights:
    np.testing.assert_array_equal(w.numpy(), means[_key(w)], err_msg=w.path)
  assert run_dir.load_model(trained)[1] == os.path.join(trained, "ckpt-12")  # Still the latest.


def test_existing_average_is_refused_then_overwritten(run_copy):
  with pytest.raises(run_dir.RunDirError, match=r"averaged/ckpt-12 exists; pass --overwrite"):
    averaging.average_checkpoints(run_copy, 2)
  path = averaging.average_checkpoints(run_copy, 2, overwrite=True)
  assert json.load(open(path + ".json"))["steps"] == [10, 12]
  averaged = _model_values(path)
  for key, mean in _means(run_copy, [10, 12]).items():
    np.testing.assert_array_equal(averaged[key], mean, err_msg=key)


def test_training_resumes_from_its_own_checkpoint_not_the_average(run_copy):
  resumed = _trainer(run_copy, 14, average_last_n=2)
  assert resumed.restore() == 12
  assert resumed.manager.latest_checkpoint == os.path.join(run_copy, "ckpt-12")
  own, averaged = (_model_values(os.path.join(run_copy, "ckpt-12")),
                   _model_values(averaging.averaged_path(run_copy, 12)))
  for w in resumed.model.weights:
    np.testing.assert_array_equal(w.numpy(), own[_key(w)], err_msg=w.path)
  assert any(not np.array_equal(own[_key(w)], averaged[_key(w)]) for w in resumed.model.weights)

  resumed.train()
  # ckpt-0 (saved first thing, so an early kill resumes) is kept but never averaged.
  assert [averaging.checkpoint_step(p) for p in resumed.manager.checkpoints] == [0] + STEPS + [14]
  assert os.path.exists(averaging.averaged_path(run_copy, 12) + ".index")  # Never swept.
  path = averaging.averaged_path(run_copy, 14)
  assert json.load(open(path + ".json"))["steps"] == [12, 14]
  written = os.stat(path + ".index").st_mtime_ns
  resumed.train()  # A rerun of the finished run keeps the average it made.
  assert os.stat(path + ".index").st_mtime_ns == written


def test_cli_prints_the_checkpoint_and_averages_all_when_n_exceeds_them(run_copy):
  proc = run("t2t-avg-all", f"--output_dir={run_copy}", "--n=50", "--overwrite")
  path = averaging.averaged_path(run_copy, 12)
  assert proc.stdout.splitlines() == [path]
  assert "holds 6 checkpoints, fewer than n=50" in proc.stderr
  assert json.load(open(path + ".json"))["steps"] == STEPS


def test_cli_user_errors_are_one_line(tmp_path):
  one_line_error(run("t2t-avg-all", f"--output_dir={tmp_path / 'nope'}", check=False),
                 "no such directory")
  one_line_error(run("t2t-avg-all", f"--output_dir={tmp_path}", check=False),
                 "no checkpoint found")
