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
