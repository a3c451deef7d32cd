"""Label-smoothed loss and metrics against a direct numpy construction."""

import numpy as np
import pytest
import tensorflow as tf

from t2tlite.training import losses, train_step


def numpy_smoothed_xent(logits, labels, eps):
  """Builds the smoothed target distribution explicitly: 1-eps on the label, eps/(V-1) elsewhere."""
  vocab = logits.shape[-1]
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  target = np.full(logits.shape, eps / (vocab - 1))
  np.put_along_axis(target, labels[..., None], 1 - eps, axis=-1)
  nll = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
  return -(target * log_probs).sum(-1), nll


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_smoothed_cross_entropy_matches_numpy(eps):
  rng = np.random.RandomState(0)
  logits = rng.randn(3, 5, 11).astype(np.float64) * 3
  labels = rng.randint(0, 11, size=(3, 5))
  xent, nll = losses.smoothed_cross_entropy(tf.constant(logits, tf.float32),
                                            tf.constant(labels, tf.int32), eps)
  want_xent, want_nll = numpy_smoothed_xent(logits, labels, eps)
  np.testing.assert_allclose(xent.numpy(), want_xent, rtol=1e-4)
  np.testing.assert_allclose(nll.numpy(), want_nll, rtol=1e-4)


def test_padding_is_masked_from_every_sum():
  rng = np.random.RandomState(1)
  logits = rng.randn(2, 4, 7).astype(np.float32)
  labels = np.array([[3, 4, 1, 0], [5, 1, 0, 0]], np.int32)  # 3 and 2 real tokens.
  sums = losses.token_loss_sums(tf.constant(logits), tf.constant(labels), 0.1)
  want_xent, want_nll = numpy_smoothed_xent(logits.astype(np.float64), labels, 0.1)
  real = labels != 0
  assert float(sums.tokens) == 5
  np.testing.assert_allclose(float(sums.loss), want_xent[real].sum(), rtol=1e-5)
  np.testing.assert_allclose(float(sums.nll), want_nll[real].sum(), rtol=1e-5)
  # Changing logits at padded positions changes nothing.
  changed = logits.copy()
  changed[~real] += 100.0
  again = losses.token_loss_sums(tf.constant(changed), tf.constant(labels), 0.1)
  np.testing.assert_allclose(float(again.loss), float(sums.loss), rtol=1e-6)


def test_accuracy_counts():
  labels = np.array([[2, 3, 1, 0], [4, 1, 0, 0], [0, 0, 0, 0]], np.int32)
  predicted = np.array([[2, 3, 1, 9], [4, 2, 7, 7], [5, 5, 5, 5]], np.int32)
  logits = np.eye(10, dtype=np.float32)[predicted] * 5.0
  sums = losses.token_loss_sums(tf.constant(logits), tf.constant(labels), 0.0)
  assert float(sums.correct) == 4  # 3 right in row 0, 1 of 2 in row 1.
  assert float(sums.sequences) == 2  # The all-pad row is no sequence.
  assert float(sums.correct_sequences) == 1


def test_smoothed_loss_minimum_is_at_the_smoothed_distribution():
  """The loss is minimised by predicting exactly the smoothed target (gradient is zero there)."""
  eps, vocab = 0.1, 6
  target = np.full(vocab, eps / (vocab - 1))
  target[2] = 1 - eps
  logits = tf.Variable(np.log(target)[None, None].astype(np.float32))
  with tf.GradientTape() as tape:
    xent, _ = losses.smoothed_cross_entropy(logits, tf.constant([[2]]), eps)
  np.testing.assert_allclose(tape.gradient(xent, logits).numpy(), 0.0, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_gradient_equals_autodiff_of_the_textbook_formula(eps, compiled):
  """The written-out gradient (softmax - q, with padding masked) against TensorFlow's autodiff of
  -sum_v q_v log_softmax(l)_v, on random logits of a large range, in float32 and bfloat16; also
  the loss compiled alone with XLA (train_step.xla_token_loss_sums, hparams xla_loss), whose
  forward and backward clusters are two functions joined by its own gradient: called eagerly on
  a variable, and inside a function traced shape-relaxed as the trainer's step is."""
  token_loss_sums = train_step.xla_token_loss_sums if compiled else losses.token_loss_sums
  rng = np.random.default_rng(7)
  vocab = 13
  labels = tf.constant(rng.integers(0, vocab, (3, 6)), tf.int32)  # Some are PAD_ID (0).

  def loss_and_gradient(logits, labels):
    with tf.GradientTape() as tape:
      tape.watch(logits)
      loss = token_loss_sums(logits, labels, eps).loss * 0.5  # An upstream gradient of 0.5.
    return loss, tape.gradient(loss, logits)

  for dtype in (tf.float32, tf.bfloat16):
    logits = tf.cast(rng.normal(size=(3, 6, vocab)) * 6, dtype)
    relaxed = tf.function(loss_and_gradient, input_signature=[
        tf.TensorSpec([None, None, vocab], dtype), tf.TensorSpec([None, None], tf.int32)])
    with tf.GradientTape() as tape:
      tape.watch(logits)
      q = tf.one_hot(labels, vocab) * (1 - eps - eps / (vocab - 1)) + eps / (vocab - 1)
      weights = tf.cast(labels != 0, tf.float32)
      textbook = 0.5 * tf.reduce_sum(
          -tf.reduce_sum(q * tf.nn.log_softmax(tf.cast(logits, tf.float32)), -1) * weights)
    expected = tf.cast(tape.gradient(textbook, logits), tf.float32).numpy()
    for loss, gradient in (loss_and_gradient(tf.Variable(logits), labels),
                           relaxed(logits, labels)):
      np.testing.assert_allclose(float(loss), float(textbook), rtol=1e-5)
      assert gradient.dtype == dtype
      np.testing.assert_allclose(tf.cast(gradient, tf.float32).numpy(), expected,
                                 atol=1e-5 if dtype == tf.float32 else 1e-2)
    assert np.abs(expected).max() > 0.1  # Not a vacuous comparison.


def test_compiled_loss_gradient_matches_tensorflows_derivation_of_the_compiled_loss():
  """train_step.xla_token_loss_sums gives its gradient as a second XLA cluster reading only the
  logits and the logsumexp; TensorFlow's own derivation of the compiled losses.token_loss_sums
  (how the step took it before) reads what the forward cluster keeps. Same values, to the bit,
  in float32 and bfloat16, with padding and an upstream gradient that is not 1."""
  derived = tf.function(losses.token_loss_sums, jit_compile=True)
  rng = np.random.default_rng(3)
  vocab = 300
  labels = tf.constant(rng.integers(0, vocab, (4, 9)), tf.int32)
  for dtype in (tf.float32, tf.bfloat16):
    logits = tf.cast(rng.normal(size=(4, 9, vocab)) * 4, dtype)
    gradients = []
    for token_loss_sums in (train_step.xla_token_loss_sums, derived):
      with tf.GradientTape() as tape:
        tape.watch(logits)
        sums = token_loss_sums(logits, labels, 0.1)
        loss = sums.loss / sums.tokens
      gradients.append(tape.gradient(loss, logits))
    assert gradients[0].dtype == dtype
    np.testing.assert_array_equal(tf.cast(gradients[0], tf.float32).numpy(),
                                  tf.cast(gradients[1], tf.float32).numpy())
    assert np.abs(tf.cast(gradients[0], tf.float32).numpy()).max() > 1e-3
