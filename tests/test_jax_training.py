"""Training under the JAX backend: the same run, checkpoints TensorFlow loads, resume, no-TF path.

A process has one Keras backend and this one is TensorFlow's, so every JAX
run trains in a subprocess (tests/jax_train_worker.py) and this process
checks what it wrote with TensorFlow, as t2t-decoder and t2t-avg-all would.
The runs share a JAX compilation cache, so a shape compiled once is not
compiled again by the next subprocess. Models: the tiny shape with one layer
per stack and one length bucket (max_length = min_length_bucket = 32), so
each step function compiles once. CI runs one JAX+TensorFlow process and one
without TensorFlow; the kill -9 resume, two devices and the real commands
on a JAX run are `slow`.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import (REPO, TINY_RUN_HPARAMS, checkpoint_values, command, one_line_error,
                           tiny_problem)

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason='jax is not installed (pip install -e ".[jax]")')
WORKER = os.path.join(REPO, "tests", "jax_train_worker.py")
# One layer per stack and a single length bucket: one compilation per step function.
# No dropout, so the TensorFlow trainer can repeat the run's steps; the slow resume test
# turns it on (its random streams must survive the kill too).
SMALL = dict(num_encoder_layers=1, num_decoder_layers=1, max_length=32, min_length_bucket=32,
             dropout=0.0)
RUN_OPTIONS = dict(train_steps=30, save_checkpoints_steps=10, save_checkpoints_secs=0,
                   eval_every=0, eval_steps=2, log_every=1, keep_best="loss", average_last_n=2,
                   keep_checkpoint_max=5)
COMPARE_STEPS = 5
SPLIT_SIZES = {"train": 600, "dev": 32, "test": 32}  # Small: tf.data passes over it are quick.
# Tests check values, not speed: XLA without its optimization passes compiles in half the time.
FAST_COMPILE = "--xla_backend_optimization_level=0"


def _problem():
  problem = tiny_problem()
  problem.split_sizes = SPLIT_SIZES
  return problem


def _env(cache_dir, **extra):
  return dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="",
              TF_CPP_MIN_LOG_LEVEL="3", JAX_COMPILATION_CACHE_DIR=str(cache_dir),
              XLA_FLAGS=extra.pop("XLA_FLAGS", FAST_COMPILE),
              PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]), **extra)


def _train(config_path, config, cache_dir, check=True, **env):
  """Runs the worker on `config`; (returncode, [result per run], stderr)."""
  with open(config_path, "w") as f:
    json.dump(config, f)
  proc = subprocess.run([sys.executable, WORKER, str(config_path)], capture_output=True,
                        text=True, env=_env(cache_dir, **env), cwd=REPO, timeout=600)
  if check:
    assert proc.returncode == 0, proc.stderr[-3000:]
  results = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
  return proc.returncode, results, proc.stderr


def _run(output_dir, options=RUN_OPTIONS, hparams=SMALL, **extra):
  return dict(output_dir=str(output_dir), options=options, hparams=hparams,
              split_sizes=SPLIT_SIZES, **extra)


def _tf_hparams(**changes):
  from t2tlite import registry
  return registry.hparams("transformer_tiny").replace(**dict(TINY_RUN_HPARAMS, **SMALL, **changes))


class JaxRuns:
  """The module's JAX run `main`, trained once (no dropout: TensorFlow must see the same steps)."""

  def __init__(self, root):
    self.root = root
    self.cache = root / "jax_cache"
    self.main = root / "main"
    self.logits = root / "main_logits.npz"
    _, results, self.log = _train(root / "runs.json", {"runs": [
        _run(self.main, logits=str(self.logits))]}, self.cache)
    self.main_result = results[0]


@pytest.fixture(scope="module")
def jax_runs(tmp_path_factory):
  return JaxRuns(tmp_path_factory.mktemp("jax"))


@needs_jax
def test_jax_run_trains_and_writes_what_tensorflow_runs_write(jax_runs):
  from t2tlite.training import checkpoint_manifest, curves
  run = str(jax_runs.main)
  assert jax_runs.main_result == dict(jax_runs.main_result, step=30, backend="jax")
  for step in (0, 10, 20, 30):  # Complete TensorFlow checkpoints, each with its manifest.
    prefix = os.path.join(run, f"ckpt-{step}")
    assert os.path.exists(prefix + ".index")
    assert checkpoint_manifest.verify(prefix) == ("ok", "")
  assert json.load(open(os.path.join(run, "best", "best.json")))["step"] == 30
  log = jax_runs.log
  assert "train step jax.jit compilation #1: global batch shape [16, 32]" in log
  assert "train step jax.jit compilation #2" not in log  # One bucket: one compilation.
  assert "dev is not decoded during training" in log and "decode the saved checkpoints" in log
  assert "step 30/30 | loss" in log
  scalars = curves.read_run(run)
  assert [s for s, _ in scalars["train"]["loss"]] == list(range(1, 31))
  assert scalars["train"]["loss"][-1][1] < scalars["train"]["loss"][0][1]  # It learns.
  assert [s for s, _ in scalars["eval"]["loss"]] == [30]
  assert {"learning_rate", "grad_norm", "tokens_per_sec"} <= set(scalars["train"])


@needs_jax
def test_tensorflow_loads_the_jax_checkpoints_with_the_same_weights_and_logits(jax_runs):
  from t2tlite.decoding import loading
  from t2tlite.training import averaging, checkpoints, run_dir
  from tests.jax_train_worker import fixed_batch
  run = str(jax_runs.main)
  model, path = run_dir.load_model(run)  # What t2t-decoder and t2t-exporter load.
  assert path.endswith("ckpt-30")
  assert checkpoints.weights_checksum(model) == jax_runs.main_result["checksum"]  # Bit for bit.
  logits = model(fixed_batch(model.hparams.input_vocab_size), training=False).numpy()
  np.testing.assert_allclose(logits, np.load(jax_runs.logits)["logits"], rtol=0, atol=1e-5)
  pipeline, checkpoint = loading.load_pipeline(run, _problem(), None)
  assert checkpoint.endswith("ckpt-30") and pipeline is not None

  # The average written under JAX is the mean of the last two checkpoints, as numpy reads them.
  last = [checkpoint_values(os.path.join(run, f"ckpt-{s}")) for s in (20, 30)]
  averaged = checkpoint_values(os.path.join(run, "averaged", "ckpt-30"))
  weights = [k for k in averaged if "rng_state" not in k and averaged[k].dtype == np.float32]
  assert len(weights) > 20
  for key in weights:
    np.testing.assert_allclose(averaged[key], (last[0][key] + last[1][key]) / 2, atol=1e-6)
  # t2t-avg-all (TensorFlow) averages the JAX run's checkpoints to the same values.
  copy = shutil.copytree(run, str(jax_runs.root / "main_copy"))
  target = averaging.average_checkpoints(copy, 2, overwrite=True)
  again = checkpoint_values(target)
  for key in weights:
    np.testing.assert_allclose(again[key], averaged[key], atol=1e-6)


@needs_jax
def test_jax_losses_match_the_tensorflow_trainer_from_the_same_start(jax_runs, tmp_path):
  """Same initial weights (the JAX run's ckpt-0), same batches (same seed), no dropout: the
  TensorFlow trainer's first COMPARE_STEPS losses are the JAX run's.

  Step 1's loss is a forward pass over identical weights and data: float32
  agreement (1e-6 relative, as test_backends.py's logits). Steps 2-5 follow
  four Adam updates whose gradients agree to ~1e-6 relative: Adam divides each
  by its own running RMS, so a relative error stays relative, and the losses
  agree to 1e-4 (measured: a few 1e-7).
  """
  from t2tlite.training import curves
  from t2tlite.training.options import TrainOptions
  from t2tlite.training.trainer import Trainer
  options = TrainOptions(train_steps=COMPARE_STEPS, save_checkpoints_steps=COMPARE_STEPS,
                         save_checkpoints_secs=0, eval_every=0, eval_steps=1, log_every=1,
                         eval_decode=False, attention_summaries=False,
                         warm_start_from=str(jax_runs.main / "ckpt-0"))
  trainer = Trainer(_problem(), _tf_hparams(), str(tmp_path / "tf"), options=options)
  trainer.train()
  tf_loss = curves.read_run(str(tmp_path / "tf"))["train"]["loss"]
  jax_loss = curves.read_run(str(jax_runs.main))["train"]["loss"][:COMPARE_STEPS]
  assert [s for s, _ in jax_loss] == [s for s, _ in tf_loss] == list(range(1, COMPARE_STEPS + 1))
  np.testing.assert_allclose(jax_loss[0][1], tf_loss[0][1], rtol=1e-6)
  np.testing.assert_allclose([v for _, v in jax_loss], [v for _, v in tf_loss], rtol=1e-4)


@needs_jax
@pytest.mark.slow  # Three more JAX processes (~1 minute on one core); CI resumes after kill -9 under TF.
def test_kill_9_then_resume_under_jax_equals_the_uninterrupted_run(jax_runs, tmp_path):
  import tensorflow as tf
  with_dropout = dict(SMALL, dropout=0.1)  # The dropout streams must continue exactly too.
  reference, killed = tmp_path / "reference", tmp_path / "killed"
  _, [expected], _ = _train(tmp_path / "reference.json",
                            {"runs": [_run(reference, hparams=with_dropout)]}, jax_runs.cache)
  code, _, _ = _train(tmp_path / "kill.json", {"runs": [
      _run(killed, hparams=with_dropout, kill_at=20)]}, jax_runs.cache, check=False)
  assert code == -9  # SIGKILL right after ckpt-20's files, before its manifest.
  assert os.path.exists(killed / "ckpt-20.index")
  assert not os.path.exists(killed / "ckpt-20.manifest.json")
  _, [resumed], log = _train(tmp_path / "resume.json", {"runs": [
      _run(killed, hparams=with_dropout)]}, jax_runs.cache)
  assert "resuming at step 20" in log
  assert resumed["checksum"] == expected["checksum"]
  # Every variable of ckpt-30 (weights, dropout states, Adam's step and moments) is the same.
  want = tf.train.load_checkpoint(str(reference / "ckpt-30"))
  got = tf.train.load_checkpoint(str(killed / "ckpt-30"))
  keys = [k for k in want.get_variable_to_shape_map() if k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
  assert sorted(keys) == sorted(k for k in got.get_variable_to_shape_map()
                                if k != "_CHECKPOINTABLE_OBJECT_GRAPH")
  assert len([k for k in keys if k.startswith("optimizer/")]) > 40  # Step + 2 moments a weight.
  assert any("rng_state" in k for k in keys)
  for key in keys:
    # The iterator's state is a serialized graph, not values; seconds_trained is wall time.
    if "train_iterator" not in key and not key.startswith("seconds_trained"):
      np.testing.assert_array_equal(got.get_tensor(key), want.get_tensor(key), err_msg=key)


@needs_jax
def test_without_tensorflow_trains_from_numpy_batches_and_tensorflow_loads_it(jax_runs,
                                                                              tmp_path):
  from t2tlite.training import checkpoint_manifest, numpy_batches, run_dir
  from tests.jax_train_worker import fixed_batch
  hp = _tf_hparams(input_vocab_size=12, target_vocab_size=12)  # As `main`: its compiled step.
  batches = str(tmp_path / "batches")
  numpy_batches.write(_problem(), None, hp, batches, steps=12, seed=1)
  run = tmp_path / "no_tf"
  options = dict(RUN_OPTIONS, train_steps=12, save_checkpoints_steps=6, average_last_n=0)
  logits = tmp_path / "no_tf_logits.npz"
  _, results, log = _train(tmp_path / "no_tf.json", {"block_tensorflow": True, "runs": [
      _run(run, options, numpy_batches=batches, logits=str(logits))]}, jax_runs.cache)
  assert results[0]["tensorflow_loaded"] is False and results[0]["step"] == 12
  assert "step 12/12 | loss" in log
  for step in (0, 6, 12):
    prefix = str(run / f"ckpt-{step}")
    assert os.path.exists(prefix + ".npz") and not os.path.exists(prefix + ".index")
    assert checkpoint_manifest.verify(prefix) == ("ok", "")
  rows = open(run / "scalars.csv").read().splitlines()
  assert rows[0] == "step,name,value"
  assert [r.split(",")[0] for r in rows if ",loss," in r] == [str(s) for s in range(1, 13)]
  assert any(r.startswith("12,loss,") for r in open(run / "eval" / "scalars.csv"))
  # The run's data identity is the problem's: t2t-decoder's checks pass with --problem.
  assert json.load(open(run / "run.json"))["problem"] == "algorithmic_reverse"
  model, path = run_dir.load_model(str(run))  # TensorFlow reads the .npz checkpoint.
  assert path.endswith("ckpt-12")
  out = model(fixed_batch(12), training=False).numpy()
  np.testing.assert_allclose(out, np.load(logits)["logits"], rtol=0, atol=1e-5)


@needs_jax
def test_backend_choice_errors_are_one_line(tmp_path):
  from t2tlite.backends import BackendError
  from t2tlite.training.options import TrainOptions, TrainOptionsError
  from t2tlite.training.trainer import Trainer
  proc = subprocess.run(command("t2t-trainer") + [
      "--backend=torch", "--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
      f"--output_dir={tmp_path / 'x'}"], capture_output=True, text=True, timeout=300)
  one_line_error(proc, "--backend=torch", "tensorflow, jax")
  with pytest.raises(TrainOptionsError, match="--keep_best=bleu .* TensorFlow only"):
    TrainOptions(backend="jax", keep_best="bleu")
  with pytest.raises(BackendError, match="--backend=jax but keras was already imported with "
                                         "the tensorflow backend"):
    Trainer(_problem(), _tf_hparams(), str(tmp_path / "y"), options=TrainOptions(backend="jax"))


@needs_jax
@pytest.mark.slow  # The three TensorFlow commands on the JAX run (decoder compiles its search).
def test_decoder_avg_all_and_exporter_take_the_jax_run_unchanged(jax_runs, tmp_path):
  from tests.helpers import run
  out_dir = shutil.copytree(str(jax_runs.main), str(tmp_path / "run"))
  source = tmp_path / "source.txt"
  source.write_text("1 2 3\n4 5 6 7\n")
  run("t2t-avg-all", f"--output_dir={out_dir}", "--n=2", "--overwrite")
  run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out_dir}",
      f"--checkpoint_path={out_dir}/averaged/ckpt-30", f"--decode_from_file={source}",
      f"--decode_to_file={tmp_path / 'decoded.txt'}")
  assert len((tmp_path / "decoded.txt").read_text().splitlines()) == 2
  run("t2t-exporter", "--problem=algorithmic_reverse", f"--output_dir={out_dir}",
      f"--export_dir={tmp_path / 'export'}")
  assert any(os.scandir(tmp_path / "export"))


@needs_jax
@pytest.mark.slow  # One more JAX process with two (forced) host devices.
def test_two_jax_devices_train_with_data_parallel(jax_runs, tmp_path):
  run = tmp_path / "two"
  options = dict(RUN_OPTIONS, train_steps=4, save_checkpoints_steps=4, keep_best="",
                 average_last_n=0)
  _, results, log = _train(tmp_path / "two.json", {"runs": [_run(run, options)]}, jax_runs.cache,
                           XLA_FLAGS="--xla_force_host_platform_device_count=2 " + FAST_COMPILE)
  assert "JAX on 2 cpu device(s): keras.distribution.DataParallel" in log
  assert "global batch shape [32, 32]" in log  # Two devices' token budgets per global batch.
  assert "tokens per update = 512 per device x 2 devices" in log
  assert results[0]["step"] == 4
