"""Sampling as the search's token choice: `sampling_method=random` in --decode_hparams.

tensor2tensor's `sampling_method=random` / `sampling_temp` and fairseq's
`--sampling --sampling-topk --temperature` draw each output token from the
model's distribution instead of taking its argmax, the usual way to make
back-translations (Edunov et al. 2018). Here a `Sampler` is the token choice
(`choose`) of `search.greedy_search`: the search hands it the next-token
log-probs with every disallowed token at -inf (a constraint's mask and the
forced EOS still apply), and it returns one token per row, drawn from

  p(y) proportional to exp(log P(y | prefix) / temperature)

over the `top_k` most likely allowed tokens (0: all of them). Ties at the
k-th value are all kept, as tensor2tensor's threshold does. The hypothesis
is still scored with the model's own log P(Y|X), not the tempered one.

Reproducible and independent of batching: a draw is the Gumbel-max trick,
argmax(scaled log-probs + Gumbel noise), with the noise a counter-based hash
of (seed, the source sentence's ids, the step, the token) computed inside the
compiled search. So one `sampling_seed` gives the same sample for a sentence
whatever batch, batch size, row or order it is decoded in (files, dev
decoding, an export); another seed gives another, and a sentence that occurs
twice gets the same sample twice (vary the seed for several samples per
sentence). The hash is "lowbias32" (Chris Wellons' integer hash search), in
uint32 arithmetic, exact under XLA and eagerly alike.
"""

import tensorflow as tf

_MIX1 = 0x7FEB352D
_MIX2 = 0x846CA68B
_GOLDEN = 0x9E3779B9  # Offsets the hashed quantities from one another.


def _u32(value):
  return tf.constant(value, tf.uint32)


def mix(x):
  """lowbias32: a bijective avalanche hash of uint32 tensors (any shape)."""
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))
  x = x * _u32(_MIX1)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(15)))
  x = x * _u32(_MIX2)
  return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))


def source_keys(inputs, source_lengths, seed: int):
  """uint32 [batch]: the random stream of each source, from its ids and `seed`.

  inputs int32 [batch, width] (EOS-terminated, padded); source_lengths int32
  [batch] without the EOS. Only the ids up to the EOS count, so the padded
  width (which depends on the batch) does not change a sentence's key.
  """
  width = tf.shape(inputs)[1]
  seed_hash = mix(_u32(seed % (1 << 32)))
  positions = tf.cast(tf.range(width), tf.uint32)[tf.newaxis]  # [1, width]
  per_token = mix(tf.bitwise.bitwise_xor(tf.cast(inputs, tf.uint32),
                                         mix(positions * _u32(_GOLDEN) + seed_hash)))
  within = tf.range(width)[tf.newaxis] <= tf.cast(source_lengths, tf.int32)[:, tf.newaxis]
  summed = tf.reduce_sum(tf.where(within, per_token, _u32(0)), axis=1)  # Wraps mod 2^32.
  return mix(tf.bitwise.bitwise_xor(summed, seed_hash))


def uniform_noise(row_keys, step, vocab_size):
  """float32 [batch, vocab] in (0, 1): the uniform draws of step `step` for every token."""
  step_key = mix(tf.bitwise.bitwise_xor(
      row_keys, mix(tf.cast(step, tf.uint32) * _u32(_GOLDEN) + _u32(1))))  # [batch]
  token_key = mix(tf.cast(tf.range(vocab_size), tf.uint32) + _u32(_GOLDEN))  # [vocab]
  bits = mix(tf.bitwise.bitwise_xor(step_key[:, tf.newaxis], token_key[tf.newaxis]))
  # The top 24 bits, centred in their interval: never 0 or 1, exact in float32.
  return (tf.cast(tf.bitwise.right_shift(bits, _u32(8)), tf.float32) + 0.5) * (2.0 ** -24)


class Sampler:
  """A token choice for `search.greedy_search`: one draw per row (module docstring).

  Args:
    temperature: > 0; the log-probs are divided by it (1: the model's distribution).
    top_k: draw among the k most likely allowed tokens; 0: all.
    row_keys: uint32 [batch], each row's random stream (`source_keys`).
  """

  def __init__(self, temperature: float, top_k: int, row_keys):
    if temperature <= 0:
      raise ValueError(f"temperature={temperature} must be > 0 (0 is argmax: no Sampler)")
    if top_k < 0:
      raise ValueError(f"top_k={top_k} must be >= 0")
    self.temperature = float(temperature)
    self.top_k = int(top_k)
    self.row_keys = row_keys

  def __call__(self, keys, step):
    """keys float32 [batch, vocab]: log-probs, -inf where not allowed -> int32 [batch]."""
    vocab = keys.shape[-1] if keys.shape[-1] is not None else tf.shape(keys)[-1]
    scaled = keys / self.temperature
    if self.top_k and (not isinstance(vocab, int) or self.top_k < vocab):
      kth = tf.math.top_k(scaled, k=self.top_k).values[:, -1:]  # [batch, 1]
      scaled = tf.where(scaled >= kth, scaled, float("-inf"))
    gumbel = -tf.math.log(-tf.math.log(uniform_noise(self.row_keys, step, vocab)))
    return tf.argmax(scaled + gumbel, axis=-1, output_type=tf.int32)
