"""The training loop: learning, checkpoints that reload exactly, and exact resumption."""

import numpy as np
import pytest
import tensorflow as tf

from t2tlite import registry, xla_choice
from t2tlite.models.transformer import Transformer
from t2tlite.training import run_dir, train_step
from t2tlite.training.optimization import make_optimizer
from t2tlite.training.trainer import Trainer
from tests.helpers import (TINY_RUN_HPARAMS, checkpoint_key, checkpoint_values, tiny_hparams,
                           tiny_problem, tiny_trainer)


def test_train_step_overfits_one_batch():
  hp = tiny_hparams(dropout=0.0, learning_rate_schedule="constant", learning_rate_constant=3e-3)
  model = Transformer(hp)
  optimizer = make_optimizer(hp)
  step = train_step.make_train_step(model, optimizer, hp)
  batch = {"inputs": tf.constant([[5, 6, 7, 1], [8, 9, 1, 0]]),
           "targets": tf.constant([[7, 6, 5, 1], [9, 8, 1, 0]])}
  first = step(batch)
  for _ in range(60):
    last = step(batch)
  assert float(first["tokens"]) == 7.0
  assert float(last["nll"]) / 7 < 0.1 * float(first["nll"]) / 7
  assert float(last["correct"]) == 7.0
  assert int(optimizer.iterations) == 61


def test_training_reduces_dev_loss_and_logs(tiny_run):
  trainer, metrics = tiny_run.trainer, tiny_run.metrics
  assert trainer.step == tiny_run.steps[-1]
  assert metrics["nll"] < np.log(12)  # Better than uniform over the 12-token vocabulary.
  events = tf.io.gfile.glob(trainer.output_dir + "/events.out.tfevents.*")
  assert events and tf.io.gfile.glob(trainer.output_dir + "/eval/events.out.tfevents.*")
  tags = {v.tag for e in tf.compat.v1.train.summary_iterator(events[0]) for v in e.summary.value}
  assert {"loss", "nll", "perplexity", "learning_rate", "accuracy", "tokens_per_sec",
          "grad_norm"} <= tags
  eval_events = tf.io.gfile.glob(trainer.output_dir + "/eval/events.out.tfevents.*")
  eval_tags = {v.tag for e in tf.compat.v1.train.summary_iterator(eval_events[0])
               for v in e.summary.value}
  # Teacher-forced metrics and, from decoding dev for real, BLEU and exact match.
  assert {"loss", "nll", "accuracy", "sequence_accuracy", "bleu", "exact_match"} <= eval_tags
  # Bucketed batches of several shapes, dev's as well: without XLA each step traced once.
  assert trainer.num_buckets > 1 and not xla_choice.train_xla(trainer.hparams)
  assert train_step.compilations(trainer.train_step) == 1
  assert train_step.compilations(trainer.eval_step) == 1


def test_checkpoint_reloads_into_an_identical_model(tiny_run):
  trainer = tiny_run.trainer
  model, path = run_dir.load_model(trainer.output_dir)
  assert path.endswith(f"ckpt-{tiny_run.steps[-1]}")
  batch = {"inputs": tf.constant([[5, 6, 7, 1]]), "targets": tf.constant([[7, 6, 5, 1]])}
  np.testing.assert_array_equal(model(batch).numpy(), trainer.model(batch).numpy())
  keys = [name for name, _ in tf.train.list_variables(path)]
  assert "model/encoder_layer_0.Sself_attention.Squery.Skernel/.ATTRIBUTES/VARIABLE_VALUE" in keys


@pytest.mark.slow  # Minutes of training or datagen; CI covers the kind elsewhere.
def test_resume_continues_on_the_same_step_and_matches_uninterrupted(tmp_path, tiny_run):
  """Killed at step 20 and rerun to 40: the weights of the session run's own step 40."""
  first = tiny_trainer(tmp_path / "resumed", 20)
  first.train()
  resumed = tiny_trainer(tmp_path / "resumed", 40)
  assert resumed.restore() == 20
  resumed.train()
  uninterrupted = checkpoint_values(f"{tiny_run.output_dir}/ckpt-40")
  for w in resumed.model.weights:
    np.testing.assert_allclose(w.numpy(), uninterrupted[checkpoint_key(w)], rtol=1e-5,
                               atol=1e-6, err_msg=w.path)


def test_checkpoints_keep_the_last_k(tmp_path):
  trainer = tiny_trainer(tmp_path, 12, save_checkpoints_steps=2, keep_checkpoint_max=3)
  trainer.train()
  assert [int(p.rsplit("-", 1)[1]) for p in trainer.manager.checkpoints] == [8, 10, 12]


def test_output_dir_with_other_hparams_is_refused(tmp_path):
  tiny_trainer(tmp_path / "run", 1)
  hp = registry.hparams("transformer_tiny").replace(**dict(TINY_RUN_HPARAMS, d_ff=128))
  with pytest.raises(run_dir.RunDirError, match="d_ff: 64 there vs 128 now"):
    Trainer(tiny_problem(), hp, str(tmp_path / "run"))


def test_a_trainer_given_no_dev_decoding_scores_dev_teacher_forced_only(tmp_path):
  """Dev decoding is handed to the Trainer (t2t-trainer and tests.helpers.tiny_trainer hand one
  over); without it, evaluation reports the teacher-forced metrics alone, and --keep_best on a
  decoded metric is refused up front."""
  from t2tlite.training.keep_best import BestKeeperError
  from t2tlite.training.options import TrainOptions
  hp = registry.hparams("transformer_tiny").replace(**TINY_RUN_HPARAMS)
  trainer = Trainer(tiny_problem(), hp, str(tmp_path / "plain"),
                    options=TrainOptions(train_steps=1, eval_steps=1))
  assert set(trainer.dev_metrics()) == {"loss", "nll", "perplexity", "accuracy",
                                        "sequence_accuracy"}
  with pytest.raises(BestKeeperError, match="dev_decoding"):
    Trainer(tiny_problem(), hp, str(tmp_path / "best"),
            options=TrainOptions(keep_best="exact_match"))


@pytest.mark.parametrize("xla", [False, True])
def test_dev_batches_carry_filler_rows_only_for_a_step_compiled_per_shape(tmp_path, xla):
  """Without XLA the dev pass holds the 100 dev pairs and no all-pad row; with XLA each
  bucket keeps one shape, its full token budget."""
  from t2tlite.training import input_pipeline
  from t2tlite.training.options import TrainOptions
  hp = registry.hparams("transformer_tiny").replace(**dict(TINY_RUN_HPARAMS, xla=xla))
  trainer = Trainer(tiny_problem(), hp, str(tmp_path / "run"), options=TrainOptions(train_steps=1))
  batches = list(trainer._dev_batches())
  real_rows = sum(int((b["targets"].numpy()[:, 0] != 0).sum()) for b in batches)
  rows = sum(b["targets"].shape[0] for b in batches)
  assert real_rows == 100
  boundaries = input_pipeline.bucket_boundaries(
      hp.max_length, hp.min_length_bucket, hp.length_bucket_step)
  full = dict(zip(boundaries, input_pipeline.bucket_batch_sizes(boundaries, hp.batch_size)))
  if xla:
    assert all(b["targets"].shape[0] == full[b["targets"].shape[1]] for b in batches)
    assert rows > real_rows
  else:
    assert rows == real_rows


class _FakeClock:
  """time.time() that only moves when a training batch is drawn: 10 s per step."""

  def __init__(self):
    self.now = 1e9

  def __call__(self):
    return self.now


class _TimedBatches:
  def __init__(self, iterator, clock):
    self.iterator, self.clock = iterator, clock

  def __next__(self):
    self.clock.now += 10.0
    return next(self.iterator)


@pytest.mark.slow  # Minutes of training or datagen; CI covers the kind elsewhere.
def test_train_seconds_bounds_the_run_across_resumes(tmp_path, monkeypatch):
  from t2tlite.training import trainer as trainer_module
  clock = _FakeClock()
  monkeypatch.setattr(trainer_module.time, "time", clock)

  evaluated = []
  real_evaluate = trainer_module.Trainer.evaluate
  def recording_evaluate(self, step):
    evaluated.append(step)
    return real_evaluate(self, step)
  monkeypatch.setattr(trainer_module.Trainer, "evaluate", recording_evaluate)

  def run(seconds):
    evaluated.clear()
    trainer = tiny_trainer(tmp_path / "timed", 100, train_seconds=seconds, eval_decode=False)
    trainer.train_iterator = _TimedBatches(trainer.train_iterator, clock)
    trainer.train()
    return trainer

  first = run(45)  # 10 s per step: 40 s after step 4 (< 45), 50 s after step 5.
  assert first.step == 5 and first.manager.latest_checkpoint.endswith("ckpt-5")
  assert float(first.seconds_trained.numpy()) == 50.0 and evaluated[-1] == 5
  # The same command again: the budget is already spent, and step 5's evaluation is logged.
  assert run(45).step == 5 and evaluated == []
  longer = run(75)  # Resumes with 50 s spent: steps 6, 7, 8 (80 s).
  assert longer.step == 8 and float(longer.seconds_trained.numpy()) == 80.0
  assert evaluated[-1] == 8


@pytest.mark.parametrize("decay_steps", [0, 2])
def test_linear_decay_ends_at_train_steps_with_a_zero_update(tmp_path, decay_steps):
  """learning_rate_decay_steps=2 with --train_steps=12: update 11 at half the rate, update 12 at
  zero (the weights stop moving); without the decay the last update moves them."""
  trainer = tiny_trainer(tmp_path / "run", 12, {"learning_rate_decay_steps": decay_steps},
                         eval_steps=1, save_checkpoints_steps=1, keep_checkpoint_max=3,
                         eval_decode=False)
  trainer.train()
  keys = [checkpoint_key(w) for w in trainer.model.trainable_weights]  # Not dropout's seed state.
  at = {step: checkpoint_values(f"{tmp_path}/run/ckpt-{step}") for step in (10, 11, 12)}
  moved = lambda a, b: max(float(np.abs(at[a][k] - at[b][k]).max()) for k in keys)  # noqa: E731
  assert moved(10, 11) > 0
  assert (moved(11, 12) == 0) == bool(decay_steps)
