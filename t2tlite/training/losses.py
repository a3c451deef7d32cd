"""Label-smoothed cross-entropy with padding masked (Section 5.4).

The smoothed target puts 1 - eps_ls on the true token and eps_ls / (V - 1) on
every other token, as tensor2tensor does. Besides that training loss, the
true negative log-likelihood is returned apart, because label smoothing
"hurts perplexity": perplexity must be exp(NLL), never exp(smoothed loss).

Everything is returned as sums with the token count, so the caller chooses the
normaliser (per batch now, global across replicas under tf.distribute).
"""

from typing import NamedTuple

import tensorflow as tf

from t2tlite.constants import PAD_ID


class TokenLossSums(NamedTuple):
  loss: tf.Tensor  # Sum over real tokens of the smoothed cross-entropy.
  nll: tf.Tensor  # Sum over real tokens of -log p(true token).
  tokens: tf.Tensor  # Number of real (non-pad) target tokens, float32.
  correct: tf.Tensor  # Real tokens whose argmax prediction is right, float32.
  sequences: tf.Tensor  # Sequences in the batch that have at least one real token.
  correct_sequences: tf.Tensor  # ...of which every real token is predicted right.


def smoothed_cross_entropy(logits, labels, label_smoothing):
  """Per-token smoothed cross-entropy and NLL.

  Args:
    logits: float [batch, length, vocab].
    labels: int32 [batch, length].
    label_smoothing: eps_ls in [0, 1).
  Returns:
    (smoothed_xent, nll), each float32 [batch, length]. Without building the
    [b, t, V] one-hot: xent = -(conf - low) log p_y - low * sum_v log p_v.
  """
  log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
  vocab_size = tf.cast(tf.shape(logits)[-1], tf.float32)
  confidence = 1.0 - label_smoothing
  low_confidence = label_smoothing / (vocab_size - 1.0)
  log_p_true = tf.gather(log_probs, labels, batch_dims=2)  # [b, t]
  xent = -(confidence - low_confidence) * log_p_true - low_confidence * tf.reduce_sum(
      log_probs, axis=-1)
  return xent, -log_p_true


def token_loss_sums(logits, labels, label_smoothing) -> TokenLossSums:
  """Sums of loss, NLL and accuracy counts over non-pad target positions."""
  weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)  # [b, t]
  xent, nll = smoothed_cross_entropy(logits, labels, label_smoothing)
  right = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=labels.dtype), labels),
                  tf.float32) * weights
  real_per_sequence = tf.reduce_sum(weights, axis=1)
  has_tokens = tf.cast(real_per_sequence > 0, tf.float32)
  all_right = tf.cast(tf.equal(tf.reduce_sum(right, axis=1), real_per_sequence), tf.float32)
  return TokenLossSums(
      loss=tf.reduce_sum(xent * weights), nll=tf.reduce_sum(nll * weights),
      tokens=tf.reduce_sum(weights), correct=tf.reduce_sum(right),
      sequences=tf.reduce_sum(has_tokens),
      correct_sequences=tf.reduce_sum(all_right * has_tokens))
