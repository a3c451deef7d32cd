"""Label-smoothed cross-entropy with padding masked (Section 5.4).

The smoothed target puts 1 - eps_ls on the true token and eps_ls / (V - 1) on
every other token, as tensor2tensor does. Besides that training loss, the
true negative log-likelihood is returned apart, because label smoothing
"hurts perplexity": perplexity must be exp(NLL), never exp(smoothed loss).

Everything is returned as sums with the token count, so the caller chooses the
normaliser (per batch now, global across replicas under tf.distribute).
Written in keras.ops: no TensorFlow import, every Keras backend.
"""

from typing import Any, NamedTuple

from keras import ops

from t2tlite.constants import PAD_ID


class TokenLossSums(NamedTuple):
  """Float32 scalar tensors of the backend in use."""
  loss: Any  # Sum over real tokens of the smoothed cross-entropy.
  nll: Any  # Sum over real tokens of -log p(true token).
  tokens: Any  # Number of real (non-pad) target tokens, float32.
  correct: Any  # Real tokens whose argmax prediction is right, float32.
  sequences: Any  # Sequences in the batch that have at least one real token.
  correct_sequences: Any  # ...of which every real token is predicted right.


def smoothed_cross_entropy(logits, labels, label_smoothing):
  """Per-token smoothed cross-entropy and NLL.

  Args:
    logits: float [batch, length, vocab].
    labels: int32 [batch, length].
    label_smoothing: eps_ls in [0, 1).
  Returns:
    (smoothed_xent, nll), each float32 [batch, length].
  """
  xent, nll, _ = _smoothed_terms(logits, labels, label_smoothing)
  return xent, nll


def _smoothed_terms(logits, labels, label_smoothing):
  """(smoothed_xent, nll, log_probs): smoothed_cross_entropy's pair and the float32
  [batch, length, vocab] log-softmax they come from (the accuracy reads it too).

  The loss is -sum_v q_v log p_v with the smoothed target q = low + (conf -
  low) * onehot(y), a dense product whose gradient is another dense product.
  Picking log p_y with a gather instead (take_along_axis) costs little forward,
  but on TensorFlow its gradient is an UnsortedSegmentSum into a zeroed [batch x
  length x vocab] buffer: profiles of the uncompiled CPU step put it at 6% of the
  base step and 13% of the tiny one (bench/step_profile.py, bench/README.md).
  The NLL, a metric with no gradient, keeps the gather.
  """
  log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
  vocab_size = logits.shape[-1]  # Static: the model's vocabulary.
  confidence = 1.0 - label_smoothing
  low_confidence = label_smoothing / (vocab_size - 1.0)
  labels = ops.cast(labels, "int32")
  smoothed = ops.one_hot(labels, vocab_size, dtype="float32") * (
      confidence - low_confidence) + low_confidence
  xent = -ops.sum(smoothed * log_probs, axis=-1)
  log_p_true = ops.take_along_axis(
      ops.stop_gradient(log_probs), ops.expand_dims(labels, -1), axis=-1)[..., 0]  # [b, t]
  return xent, -log_p_true, log_probs


def token_loss_sums(logits, labels, label_smoothing, segments=None) -> TokenLossSums:
  """Sums of loss, NLL and accuracy counts over non-pad target positions.

  `segments` (int [b, t], or None): the targets' segment ids of a packed
  batch (t2tlite/data/packing.py); sequences are then counted per pair, not
  per row. The token sums do not depend on it.
  """
  weights = ops.cast(ops.not_equal(labels, PAD_ID), "float32")  # [b, t]
  xent, nll, log_probs = _smoothed_terms(logits, labels, label_smoothing)
  # Right when the true token scores highest: argmax's answer wherever the maximum is unique
  # (float logits do not tie in practice), without an argmax over the vocabulary (Keras's
  # TensorFlow argmax adds a -0.0 fix that costs four more passes over [batch, length, vocab]).
  best = ops.max(ops.stop_gradient(log_probs), axis=-1)
  right = ops.cast(ops.greater_equal(-nll, best), "float32") * weights
  if segments is None:
    real_per_sequence = ops.sum(weights, axis=1)
    has_tokens = ops.cast(real_per_sequence > 0, "float32")
    all_right = ops.cast(ops.equal(ops.sum(right, axis=1), real_per_sequence), "float32")
    sequences, correct_sequences = ops.sum(has_tokens), ops.sum(all_right * has_tokens)
  else:
    sequences, correct_sequences = _pair_counts(segments, weights, right)
  return TokenLossSums(
      loss=ops.sum(xent * weights), nll=ops.sum(nll * weights),
      tokens=ops.sum(weights), correct=ops.sum(right),
      sequences=sequences, correct_sequences=correct_sequences)


def _pair_counts(segments, weights, right):
  """(pairs with a real target token, pairs whose every real token is right) of packed rows.

  A pair is counted at its last real token: the token whose segment id differs
  from the next position's (or that ends the row).
  """
  same = ops.cast(ops.equal(segments[:, :, None], segments[:, None, :]), "float32")  # [b, t, t]
  wrong_in_pair = ops.einsum("bij,bj->bi", same, weights - right)  # [b, t]
  following = ops.pad(segments[:, 1:], [[0, 0], [0, 1]], constant_values=-1)
  last = ops.cast(ops.not_equal(segments, following), "float32") * weights
  return ops.sum(last), ops.sum(last * ops.cast(ops.equal(wrong_in_pair, 0.0), "float32"))
