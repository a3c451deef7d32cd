"""The Noam schedule and Adam settings of Section 5.3."""

import numpy as np
import pytest

from t2tlite import registry
from t2tlite.training import optimization


def paper_lrate(step, d_model=512, warmup=4000):
  return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("step", [1, 2, 100, 3999, 4000, 4001, 100000])
def test_noam_matches_paper_formula(step):
  schedule = optimization.NoamSchedule(512, 4000)
  # `iterations` counts updates already made: the first update (step 1) sees iterations=0.
  np.testing.assert_allclose(float(schedule(step - 1)), paper_lrate(step), rtol=1e-6)


def test_noam_peaks_at_warmup():
  schedule = optimization.NoamSchedule(512, 4000)
  iterations = np.arange(3900, 4100)
  rates = [float(schedule(i)) for i in iterations]
  assert iterations[int(np.argmax(rates))] == 3999  # The 4000th update is the peak.
  assert all(np.diff(rates[:100]) > 0) and all(np.diff(rates[100:]) < 0)


def test_optimizer_uses_paper_adam_and_schedule():
  hp = registry.hparams("transformer_base")
  opt = optimization.make_optimizer(hp)
  assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.98, 1e-9)
  np.testing.assert_allclose(float(opt.learning_rate), paper_lrate(1), rtol=1e-6)


def test_constant_multiplier_and_schedule_config():
  schedule = optimization.NoamSchedule(256, 100, constant=2.0)
  np.testing.assert_allclose(float(schedule(9)), 2.0 * paper_lrate(10, 256, 100), rtol=1e-6)
  assert optimization.NoamSchedule(**schedule.get_config()).get_config() == schedule.get_config()


@pytest.mark.parametrize("compiled", [False, True])
def test_adam_update_is_the_paper_s_adam_step_by_step(compiled):
  """The optimizer (TensorFlow's fused Adam kernel under TensorFlow) against Adam written out in
  numpy, over 5 updates of random gradients, eagerly and inside a tf.function (the train step):
  m += (1 - b1)(g - m), v += (1 - b2)(g^2 - v), w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps)."""
  import keras
  import tensorflow as tf
  hp = registry.hparams("transformer_tiny").replace(learning_rate_schedule="constant",
                                                     learning_rate_constant=0.01)
  rng = np.random.default_rng(5)
  start = [rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(7,)).astype(np.float32)]
  grads = [[rng.normal(size=w.shape).astype(np.float32) * 10 ** rng.uniform(-3, 1) for w in start]
           for _ in range(5)]
  weights = [keras.Variable(w) for w in start]
  opt = optimization.make_optimizer(hp)
  opt.build(weights)
  apply = lambda g: opt.apply_gradients(zip(g, weights))  # noqa: E731
  if compiled:
    apply = tf.function(apply)
  for g in grads:
    apply([tf.constant(x) for x in g])
  b1, b2, eps, lr = hp.adam_beta1, hp.adam_beta2, hp.adam_epsilon, 0.01
  for i, w0 in enumerate(start):
    w, m, v = w0.astype(np.float64), np.zeros(w0.shape), np.zeros(w0.shape)
    for t, g in enumerate(grads, start=1):
      m += (1 - b1) * (g[i] - m)
      v += (1 - b2) * (g[i] ** 2 - v)
      w -= lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(v) + eps)
    np.testing.assert_allclose(weights[i].numpy(), w, rtol=1e-5, atol=1e-6)
    assert np.abs(w - w0).max() > 0.01  # The updates moved the weights.
  assert int(opt.iterations.numpy()) == 5


@pytest.mark.parametrize("step", [1, 500, 999, 1000, 1001, 1500, 1999, 2000, 2500])
def test_linear_decay_is_tensor2tensor_s_factor(step):
  """t2t's linear_decay: min(1, max(0, (train_steps - step) / decay_steps)) times the Noam rate."""
  schedule = optimization.LinearDecaySchedule(optimization.NoamSchedule(256, 100, 2.0),
                                              decay_steps=1000, train_steps=2000)
  factor = min(1.0, max(0.0, (2000 - step) / 1000))
  np.testing.assert_allclose(float(schedule(step - 1)),
                             2.0 * paper_lrate(step, 256, 100) * factor, rtol=1e-6, atol=1e-12)


def test_linear_decay_reaches_zero_at_train_steps_and_round_trips_its_config():
  rates = [float(optimization.LinearDecaySchedule(0.01, 4, 10)(i)) for i in range(12)]
  # Updates 1-6 at the full rate, then 3/4, 2/4, 1/4 of it, 0 at update 10 and after.
  np.testing.assert_allclose(rates, [0.01] * 6 + [0.0075, 0.005, 0.0025, 0, 0, 0], atol=1e-9)
  for base in (0.01, optimization.NoamSchedule(256, 100, 2.0)):
    schedule = optimization.LinearDecaySchedule(base, 4, 10)
    again = optimization.LinearDecaySchedule.from_config(schedule.get_config())
    assert [float(again(i)) for i in range(12)] == [float(schedule(i)) for i in range(12)]


def test_make_optimizer_decays_to_train_steps_only_when_asked():
  hp = registry.hparams("transformer_multi30k")
  assert isinstance(optimization.make_optimizer(hp, 5000)._learning_rate,
                    optimization.NoamSchedule)  # Off by default: the paper's schedule.
  decayed = optimization.make_optimizer(hp.replace(learning_rate_decay_steps=2000), 5000)
  rate = decayed._learning_rate
  noam = optimization.NoamSchedule(hp.d_model, hp.learning_rate_warmup_steps,
                                   hp.learning_rate_constant)
  assert float(rate(2999)) == pytest.approx(float(noam(2999)))  # Step 3000: decay starts.
  assert float(rate(3999)) == pytest.approx(0.5 * float(noam(3999)))
  assert float(rate(4999)) == 0.0
  with pytest.raises(ValueError, match="learning_rate_decay_steps=2000 needs --train_steps"):
    optimization.make_optimizer(hp.replace(learning_rate_decay_steps=2000))
  with pytest.raises(ValueError, match="learning_rate_decay_steps=-1 must be >= 0"):
    hp.replace(learning_rate_decay_steps=-1)
