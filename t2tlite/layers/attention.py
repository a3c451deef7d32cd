"""Scaled dot-product and multi-head attention (Section 3.2).

Tensors keep the layout [batch, length, heads, depth] throughout (the layout
of keras.layers.MultiHeadAttention), so the per-head projections are plain
Dense layers reshaped, and the incremental decoder updates its key/value cache
at one position with a scatter, without transposes.

Masks are booleans (True = may attend), so no dtype policy can touch them
(Keras autocasts float arguments of a layer to its compute dtype, which would
turn a float32 -1e9 bias into -inf in float16). They become a float32 bias
only inside the attention core, after the logits are cast to float32: -1e9
never meets a 16-bit type, and a fully masked row (a padded query) gives a
uniform distribution instead of NaN.
"""

import keras
import tensorflow as tf

from t2tlite.constants import NEG_INF, PAD_ID


def padding_mask(ids, pad_id: int = PAD_ID):
  """[batch, length] token ids -> [batch, 1, 1, length] bool, False at pads."""
  real = keras.ops.not_equal(ids, pad_id)
  return keras.ops.expand_dims(keras.ops.expand_dims(real, 1), 1)


def causal_mask(length):
  """[1, 1, length, length] bool: position i may attend to positions <= i."""
  positions = tf.range(length)
  return (positions[:, tf.newaxis] >= positions[tf.newaxis, :])[tf.newaxis, tf.newaxis]


def scaled_dot_product_attention(query, key, value, mask=None, dropout_rate=0.0, seed=None):
  """softmax(Q K^T / sqrt(d_k)) V over allowed positions, with the softmax in float32.

  Args:
    query: [batch, q_length, heads, d_k].
    key: [batch, kv_length, heads, d_k].
    value: [batch, kv_length, heads, d_v].
    mask: bool, broadcastable to [batch, heads, q_length, kv_length] (True =
      may attend), or None.
    dropout_rate: dropout on the attention weights (Python float).
    seed: int [2] seed for stateless dropout; required when dropout_rate > 0.
  Returns:
    [batch, q_length, heads, d_v] in the dtype of `value`.
  """
  depth = tf.cast(tf.shape(query)[-1], tf.float32)
  query = query * tf.cast(tf.math.rsqrt(depth), query.dtype)  # Scale first: smaller 16-bit products.
  one_query = query.shape[1] == 1  # Incremental decoding: one position per step.
  if one_query:
    # Multiply-and-reduce instead of B*h batched [1, d] x [d, S] matmuls, which
    # XLA's CPU backend runs as thousands of tiny calls (bench/decode_speed.py).
    logits = tf.reduce_sum(query * key, axis=-1)  # [B, S, h]
    logits = tf.transpose(logits, [0, 2, 1])[:, :, tf.newaxis, :]  # [B, h, 1, S]
  else:
    logits = tf.einsum("bthd,bshd->bhts", query, key)  # [B, h, T, S]
  logits = tf.cast(logits, tf.float32)
  if mask is not None:
    logits += tf.where(mask, 0.0, NEG_INF)  # Illegal positions -> -1e9 (Section 3.2.3).
  weights = tf.nn.softmax(logits, axis=-1)
  if dropout_rate > 0.0:
    keep = tf.random.stateless_uniform(tf.shape(weights), seed=seed) >= dropout_rate
    weights = tf.where(keep, weights / (1.0 - dropout_rate), 0.0)
  weights = tf.cast(weights, value.dtype)
  if one_query:
    per_position = tf.transpose(weights[:, :, 0, :], [0, 2, 1])[..., tf.newaxis]  # [B, S, h, 1]
    return tf.reduce_sum(per_position * value, axis=1, keepdims=True)  # [B, 1, h, d_v]
  return tf.einsum("bhts,bshd->bthd", weights, value)  # [B, T, h, d_v]


# The same function compiled by XLA. Inside an already-compiled step it simply
# inlines; called from uncompiled code it is compiled once per shape.
xla_scaled_dot_product_attention = tf.function(scaled_dot_product_attention, jit_compile=True)


class MultiHeadAttention(keras.layers.Layer):
  """Multi-head attention with d_k and d_v independent of d_model / h.

  W^Q, W^K: d_model x (h * d_k); W^V: d_model x (h * d_v); W^O: (h * d_v) x d_model.
  `call` serves training and full forward passes; `project_key_value` and
  `attend` let the decoder cache keys/values (see layers/transformer_layers.py).
  """

  def __init__(self, num_heads, key_dim, value_dim, dropout=0.0, use_bias=False,
               xla=True, kernel_initializer="glorot_uniform", **kwargs):
    super().__init__(**kwargs)
    self.num_heads = num_heads
    self.key_dim = key_dim
    self.value_dim = value_dim
    self.dropout = dropout
    self.use_bias = use_bias
    self.xla = xla
    self.kernel_initializer = keras.initializers.get(kernel_initializer)
    self.seed_generator = keras.random.SeedGenerator()

  def build(self, query_shape, value_shape=None):
    value_shape = query_shape if value_shape is None else value_shape
    output_dim = query_shape[-1]
    h = self.num_heads

    def dense(units, name):
      return keras.layers.Dense(
          units, use_bias=self.use_bias, kernel_initializer=self.kernel_initializer,
          dtype=self.dtype_policy, name=name)

    self.query_dense = dense(h * self.key_dim, "query")
    self.key_dense = dense(h * self.key_dim, "key")
    self.value_dense = dense(h * self.value_dim, "value")
    self.output_dense = dense(output_dim, "output")
    self.query_dense.build(query_shape)
    self.key_dense.build(value_shape)
    self.value_dense.build(value_shape)
    self.output_dense.build(tuple(query_shape[:-1]) + (h * self.value_dim,))

  def _split_heads(self, x, depth):
    """[batch, length, heads * depth] -> [batch, length, heads, depth]."""
    return tf.reshape(x, tf.concat([tf.shape(x)[:2], [self.num_heads, depth]], 0))

  def project_query(self, query):
    return self._split_heads(self.query_dense(query), self.key_dim)

  def project_key_value(self, value):
    """[batch, length, d_model] -> keys [b, l, h, d_k] and values [b, l, h, d_v]."""
    key = self._split_heads(self.key_dense(value), self.key_dim)
    value = self._split_heads(self.value_dense(value), self.value_dim)
    return key, value

  def attend(self, query, key, value, mask=None, training=False):
    """Projected query [b, t, h, d_k] over cached/projected keys -> [b, t, d_model]."""
    rate = self.dropout if training else 0.0
    seed = self.seed_generator.next() if rate > 0.0 else None
    attention = xla_scaled_dot_product_attention if self.xla else scaled_dot_product_attention
    context = attention(query, key, value, mask, rate, seed)  # [b, t, h, d_v]
    context = tf.reshape(context, tf.concat([tf.shape(context)[:2],
                                             [self.num_heads * self.value_dim]], 0))
    return self.output_dense(context)

  def attend_grouped(self, query, key, value, mask=None):
    """One query per row, rows grouped by sentence, over per-sentence keys (inference).

    query [b * k, 1, h, d_k] where rows [i * k, (i + 1) * k) belong to sentence
    i (the k beams of beam search); key/value [b, s, h, d] and mask [b, 1, 1, s]
    are per sentence, so encoder-decoder attention reads the memory once per
    sentence instead of once per beam: the k queries of a sentence attend
    together as a length-k query block. Returns [b * k, 1, d_model].
    """
    batch = key.shape[0] or tf.shape(key)[0]
    grouped = tf.reshape(query, [batch, -1, self.num_heads, self.key_dim])  # [b, k, h, d_k]
    attention = xla_scaled_dot_product_attention if self.xla else scaled_dot_product_attention
    context = attention(grouped, key, value, mask)  # [b, k, h, d_v]
    context = tf.reshape(context, [-1, 1, self.num_heads * self.value_dim])
    return self.output_dense(context)

  def call(self, query, value=None, attention_mask=None, causal=False, training=None):
    """query [b, t, d_model], value [b, s, d_model] (default: query) -> [b, t, d_model].

    `attention_mask` is bool broadcastable to [b, h, t, s]; `causal` adds the
    look-ahead mask of decoder self-attention.
    """
    value = query if value is None else value
    mask = attention_mask
    if causal:
      look_ahead = causal_mask(tf.shape(query)[1])
      mask = look_ahead if mask is None else tf.logical_and(mask, look_ahead)
    key, value = self.project_key_value(value)
    return self.attend(self.project_query(query), key, value, mask, bool(training))

  def compute_output_shape(self, query_shape, value_shape=None):
    return query_shape

  def get_config(self):
    config = super().get_config()
    config.update(
        num_heads=self.num_heads, key_dim=self.key_dim, value_dim=self.value_dim,
        dropout=self.dropout, use_bias=self.use_bias, xla=self.xla,
        kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
    return config
