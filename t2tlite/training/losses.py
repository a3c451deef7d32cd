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
  xent, nll, _, _ = _smoothed_terms(logits, labels, label_smoothing)
  return xent, nll


def _real_token_weights(labels):
  """float32 [b, t]: 1 at real target tokens, 0 at padding (what the loss sums count)."""
  return ops.cast(ops.not_equal(labels, PAD_ID), "float32")


def _targets(label_smoothing, vocab_size):
  """(confidence, low_confidence): the smoothed target's weight on the true token, on each other."""
  return 1.0 - label_smoothing, label_smoothing / (vocab_size - 1.0)


def _smoothed_terms(logits, labels, label_smoothing):
  """(smoothed_xent, nll, true_is_best, logsumexp), each [batch, length]: smoothed_cross_entropy's
  pair, whether the true token's logit is the row's largest (the accuracy's test), and the
  logsumexp of the logits (what the gradient reads of the forward pass).

  The smoothed target q = low + (conf - low) * onehot(y) sums to 1, so
  -sum_v q_v log p_v = logsumexp(l) - (conf - low) * l_y - low * sum_v l_v: the forward
  pass needs only reductions over the vocabulary, never the [batch, length, vocab]
  log-softmax or q. The gradient with respect to the logits is the textbook
  softmax(l) - q, written out (`_xent_gradient`) and built only inside the
  backward pass, so nothing of that size is kept between the passes beyond the
  logits themselves. Autodiff through log_softmax and q * log p instead kept
  [batch, length, vocab] float32 intermediates for the backward pass: measured at
  the base shape's 4096 tokens per step, this form's peak memory is 0.37-0.41 GiB
  lower (6%), the losses of the first steps identical, the speed the same within
  the host's noise (bench/README.md, "How cost grows"). The NLL and the accuracy
  read the same reductions, with no gradient.
  """
  logits = ops.cast(logits, "float32")
  confidence, low_confidence = _targets(label_smoothing, logits.shape[-1])
  labels = ops.cast(labels, "int32")
  xent, logsumexp = _smoothed_xent_and_logsumexp(logits, labels, confidence, low_confidence)
  fixed = ops.stop_gradient(logits)
  logit_true = ops.take_along_axis(fixed, ops.expand_dims(labels, -1), axis=-1)[..., 0]
  logsumexp = ops.stop_gradient(logsumexp)
  nll = logsumexp - logit_true
  true_is_best = ops.greater_equal(logit_true, ops.max(fixed, axis=-1))
  return xent, nll, true_is_best, logsumexp


def _xent_gradient(l, labels, logsumexp, d_xent, d_logsumexp, confidence, low_confidence):
  """d / d l of d_xent * xent + d_logsumexp * logsumexp, float32 [batch, length, vocab]:
  (d_xent + d_logsumexp) * softmax(l) - d_xent * q."""
  probs = ops.exp(l - ops.expand_dims(logsumexp, -1))
  target = ops.one_hot(labels, l.shape[-1], dtype="float32") * (
      confidence - low_confidence) + low_confidence
  return (ops.expand_dims(d_xent + d_logsumexp, -1) * probs
          - ops.expand_dims(d_xent, -1) * target)


def _smoothed_xent_and_logsumexp(logits, labels, confidence, low_confidence):
  """(smoothed cross-entropy, logsumexp of the logits), float32 [batch, length], with the
  gradient written out: d xent / d l = softmax(l) - q and d logsumexp / d l = softmax(l)."""

  @ops.custom_gradient
  def forward(l):
    # grad() below is the gradient: the forward value may read l through stop_gradient,
    # which also makes a tensor of a variable (TensorFlow passes one through unchanged).
    l = ops.stop_gradient(l)
    top = ops.max(l, axis=-1, keepdims=True)
    logsumexp = ops.log(ops.sum(ops.exp(l - top), axis=-1)) + top[..., 0]
    logit_true = ops.take_along_axis(l, ops.expand_dims(labels, -1), axis=-1)[..., 0]
    xent = (logsumexp - (confidence - low_confidence) * logit_true
            - low_confidence * ops.sum(l, axis=-1))

    def grad(*args, upstream=None):
      if upstream is None:  # TensorFlow: one argument per output; JAX: one tuple of them.
        upstream = args[0] if len(args) == 1 else args
      d_xent, d_logsumexp = upstream
      return _xent_gradient(l, labels, logsumexp, d_xent, d_logsumexp, confidence,
                            low_confidence)

    return (xent, logsumexp), grad

  return forward(logits)


def token_loss_sums(logits, labels, label_smoothing, segments=None) -> TokenLossSums:
  """Sums of loss, NLL and accuracy counts over non-pad target positions.

  `segments` (int [b, t], or None): the targets' segment ids of a packed
  batch (t2tlite/data/packing.py); sequences are then counted per pair, not
  per row. The token sums do not depend on it.
  """
  return token_loss_sums_and_logsumexp(logits, labels, label_smoothing, segments)[0]


def token_loss_sums_and_logsumexp(logits, labels, label_smoothing, segments=None):
  """(token_loss_sums' sums, the logsumexp of the logits [batch, length] float32, no gradient).

  The logsumexp is what `loss_logits_gradient` reads of the forward pass.
  """
  weights = _real_token_weights(labels)
  xent, nll, true_is_best, logsumexp = _smoothed_terms(logits, labels, label_smoothing)
  # Right when the true token scores highest: argmax's answer wherever the maximum is unique
  # (float logits do not tie in practice), without an argmax over the vocabulary (Keras's
  # TensorFlow argmax adds a -0.0 fix that costs four more passes over [batch, length, vocab]).
  right = ops.cast(true_is_best, "float32") * weights
  if segments is None:
    real_per_sequence = ops.sum(weights, axis=1)
    has_tokens = ops.cast(real_per_sequence > 0, "float32")
    all_right = ops.cast(ops.equal(ops.sum(right, axis=1), real_per_sequence), "float32")
    sequences, correct_sequences = ops.sum(has_tokens), ops.sum(all_right * has_tokens)
  else:
    sequences, correct_sequences = _pair_counts(segments, weights, right)
  sums = TokenLossSums(
      loss=ops.sum(xent * weights), nll=ops.sum(nll * weights),
      tokens=ops.sum(weights), correct=ops.sum(right),
      sequences=sequences, correct_sequences=correct_sequences)
  return sums, logsumexp


def loss_logits_gradient(logits, labels, label_smoothing, logsumexp, d_loss):
  """d (d_loss * token_loss_sums(...).loss) / d logits, in the logits' dtype.

  What autodiff of token_loss_sums gives (its loss is the only sum that depends on
  the logits: the NLL and the counts read them through stop_gradient), for a caller
  that runs the forward and the backward pass as two functions of its own: the
  backward reads the logits and the forward's logsumexp, nothing else of the
  forward pass.
  """
  l = ops.cast(logits, "float32")
  labels = ops.cast(labels, "int32")
  confidence, low_confidence = _targets(label_smoothing, l.shape[-1])
  d_xent = _real_token_weights(labels) * d_loss
  gradient = _xent_gradient(l, labels, logsumexp, d_xent, ops.zeros_like(d_xent), confidence,
                            low_confidence)
  return ops.cast(gradient, logits.dtype)


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
