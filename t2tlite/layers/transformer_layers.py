"""Encoder and decoder layers (Section 3.1), post-norm by default.

Each sub-layer is wrapped as the paper writes it, LayerNorm(x + Dropout(f(x)))
("post"), or as tensor2tensor v2 does, x + Dropout(f(LayerNorm(x))) ("pre");
a pre-norm stack needs one more LayerNorm at its end (see models/transformer.py).
Written in keras.ops: no TensorFlow import, every Keras backend.
"""

import keras
from keras import ops

from t2tlite.layers.attention import MultiHeadAttention
from t2tlite.layers.dropout import Dropout


class FeedForward(keras.layers.Layer):
  """FFN(x) = max(0, x W1 + b1) W2 + b2, with optional dropout after the activation."""

  def __init__(self, d_ff, activation="relu", relu_dropout=0.0, **kwargs):
    super().__init__(**kwargs)
    self.d_ff = d_ff
    self.activation = activation
    self.relu_dropout = relu_dropout

  def build(self, input_shape):
    self.inner = keras.layers.Dense(self.d_ff, activation=self.activation,
                                    dtype=self.dtype_policy, name="inner")
    self.inner.build(input_shape)
    self.dropout = Dropout(self.relu_dropout, dtype=self.dtype_policy)
    self.outer = keras.layers.Dense(input_shape[-1], dtype=self.dtype_policy, name="outer")
    self.outer.build(tuple(input_shape[:-1]) + (self.d_ff,))

  def call(self, x, training=None):
    return self.outer(self.dropout(self.inner(x), training=training))

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update(d_ff=self.d_ff, activation=self.activation, relu_dropout=self.relu_dropout)
    return config


class _SubLayerWrapper(keras.layers.Layer):
  """Shared plumbing of EncoderLayer and DecoderLayer: residual, dropout and norm."""

  def __init__(self, num_heads, key_dim, value_dim, d_ff, dropout=0.1,
               attention_dropout=0.0, relu_dropout=0.0, layer_norm_position="post",
               layer_norm_epsilon=1e-6, activation="relu", use_bias=False,
               flash_attention=False, **kwargs):
    super().__init__(**kwargs)
    if layer_norm_position not in ("post", "pre"):
      raise ValueError(f"layer_norm_position must be 'post' or 'pre', got {layer_norm_position!r}")
    self.num_heads = num_heads
    self.key_dim = key_dim
    self.value_dim = value_dim
    self.d_ff = d_ff
    self.dropout = dropout
    self.attention_dropout = attention_dropout
    self.relu_dropout = relu_dropout
    self.layer_norm_position = layer_norm_position
    self.layer_norm_epsilon = layer_norm_epsilon
    self.activation = activation
    self.use_bias = use_bias
    self.flash_attention = flash_attention

  def _attention(self, name, query_shape, value_shape=None):
    layer = MultiHeadAttention(
        self.num_heads, self.key_dim, self.value_dim, dropout=self.attention_dropout,
        use_bias=self.use_bias, flash_attention=self.flash_attention, dtype=self.dtype_policy,
        name=name)
    layer.build(query_shape, value_shape)
    return layer

  def _norm_and_dropout(self, name, shape):
    norm = keras.layers.LayerNormalization(
        epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"{name}_norm")
    norm.build(shape)
    return norm, Dropout(self.dropout, dtype=self.dtype_policy)

  def _feed_forward(self, shape):
    ffn = FeedForward(self.d_ff, self.activation, self.relu_dropout,
                      dtype=self.dtype_policy, name="feed_forward")
    ffn.build(shape)
    return ffn

  def _residual(self, x, norm, dropout, sublayer, training):
    """Post: LN(x + Dropout(f(x))); pre: x + Dropout(f(LN(x)))."""
    if self.layer_norm_position == "pre":
      return x + dropout(sublayer(norm(x)), training=training)
    return norm(x + dropout(sublayer(x), training=training))

  def compute_output_shape(self, input_shape, *args, **kwargs):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update(
        num_heads=self.num_heads, key_dim=self.key_dim, value_dim=self.value_dim,
        d_ff=self.d_ff, dropout=self.dropout, attention_dropout=self.attention_dropout,
        relu_dropout=self.relu_dropout, layer_norm_position=self.layer_norm_position,
        layer_norm_epsilon=self.layer_norm_epsilon, activation=self.activation,
        use_bias=self.use_bias, flash_attention=self.flash_attention)
    return config


class EncoderLayer(_SubLayerWrapper):
  """Self-attention then FFN, each wrapped in residual + dropout + layer norm."""

  def build(self, x_shape):
    input_shape = x_shape
    self.self_attention = self._attention("self_attention", input_shape)
    self.attention_norm, self.attention_dropout_layer = self._norm_and_dropout(
        "self_attention", input_shape)
    self.feed_forward = self._feed_forward(input_shape)
    self.ffn_norm, self.ffn_dropout_layer = self._norm_and_dropout("feed_forward", input_shape)

  def call(self, x, padding_mask=None, training=None):
    """x [b, s, d_model]; padding_mask [b, 1, 1, s] bool (False at pads) -> [b, s, d_model].

    A packed batch passes its [b, 1, s, s] self-attention mask (padding and
    segments, `attention.packed_attention_masks`) as `padding_mask`.
    """
    x = self._residual(
        x, self.attention_norm, self.attention_dropout_layer,
        lambda y: self.self_attention(y, attention_mask=padding_mask, training=training),
        training)
    return self._residual(x, self.ffn_norm, self.ffn_dropout_layer,
                          lambda y: self.feed_forward(y, training=training), training)

  def call_with_attention_weights(self, x, padding_mask=None, query_mask=None):
    """Inference `call` that also returns the self-attention weights [b, h, s, s] float32.

    `query_mask` bool [b, s] (True = real token): rows of padded queries are
    zero. For looking inside a trained model (t2tlite/visualization); the
    training graph never calls it.
    """
    weights = []

    def attend(y):
      out, w = self.self_attention.call_with_attention_weights(
          y, attention_mask=padding_mask, query_mask=query_mask)
      weights.append(w)
      return out

    x = self._residual(x, self.attention_norm, self.attention_dropout_layer, attend, False)
    x = self._residual(x, self.ffn_norm, self.ffn_dropout_layer,
                       lambda y: self.feed_forward(y, training=False), False)
    return x, weights[0]


class DecoderLayer(_SubLayerWrapper):
  """Causal self-attention, encoder-decoder attention, then FFN.

  `call` runs a whole target sequence (training, scoring). `call_cached` runs
  one position against a fixed-size key/value cache for incremental decoding;
  it returns (output, new_cache) and is never part of the functional graph.
  """

  def build(self, x_shape, memory_shape=None):
    input_shape = x_shape
    memory_shape = input_shape if memory_shape is None else memory_shape
    self.self_attention = self._attention("self_attention", input_shape)
    self.self_norm, self.self_dropout_layer = self._norm_and_dropout(
        "self_attention", input_shape)
    self.cross_attention = self._attention("cross_attention", input_shape, memory_shape)
    self.cross_norm, self.cross_dropout_layer = self._norm_and_dropout(
        "cross_attention", input_shape)
    self.feed_forward = self._feed_forward(input_shape)
    self.ffn_norm, self.ffn_dropout_layer = self._norm_and_dropout("feed_forward", input_shape)

  def call(self, x, memory, memory_mask=None, self_attention_mask=None, training=None):
    """x [b, t, d_model], memory [b, s, d_model], memory_mask [b, 1, 1, s] bool -> [b, t, d_model].

    Packed batches: `memory_mask` is the [b, 1, t, s] encoder-decoder mask and
    `self_attention_mask` the [b, 1, t, t] segment mask (the look-ahead mask
    is applied either way); see `attention.packed_attention_masks`.
    """
    x = self._residual(
        x, self.self_norm, self.self_dropout_layer,
        lambda y: self.self_attention(y, attention_mask=self_attention_mask, causal=True,
                                      training=training), training)
    x = self._residual(
        x, self.cross_norm, self.cross_dropout_layer,
        lambda y: self.cross_attention(y, memory, attention_mask=memory_mask, training=training),
        training)
    return self._residual(x, self.ffn_norm, self.ffn_dropout_layer,
                          lambda y: self.feed_forward(y, training=training), training)

  def call_with_attention_weights(self, x, memory, memory_mask=None, query_mask=None):
    """Inference `call` that also returns (self [b, h, t, t], cross [b, h, t, s]) weights.

    Self-attention weights are zero after the query's position (look-ahead
    mask), cross-attention weights are zero on padded source tokens, and rows
    of padded target positions (False in `query_mask`, bool [b, t]) are zero.
    """
    weights = {}

    def self_attend(y):
      out, weights["self"] = self.self_attention.call_with_attention_weights(
          y, causal=True, query_mask=query_mask)
      return out

    def cross_attend(y):
      out, weights["cross"] = self.cross_attention.call_with_attention_weights(
          y, memory, attention_mask=memory_mask, query_mask=query_mask)
      return out

    x = self._residual(x, self.self_norm, self.self_dropout_layer, self_attend, False)
    x = self._residual(x, self.cross_norm, self.cross_dropout_layer, cross_attend, False)
    x = self._residual(x, self.ffn_norm, self.ffn_dropout_layer,
                       lambda y: self.feed_forward(y, training=False), False)
    return x, weights["self"], weights["cross"]

  def memory_key_values(self, memory):
    """Encoder output [b, s, d_model] -> cross-attention keys and values, computed once."""
    return self.cross_attention.project_key_value(memory)

  def call_cached(self, x, step, cache, history_index, memory_kv, memory_mask, horizons=None):
    """One decoding position.

    The cache is append-only: row r writes the key/value of its token at
    position `step` and never rewrites it. When beam search reorders the
    hypotheses, the cache is not copied; instead `history_index` says where
    each position of each row's history lives (see
    `Transformer.reorder_decode_state`), and the keys/values are gathered from
    there inside the attention, which XLA fuses into the dot products. That
    halves the memory traffic of a step against copying the whole cache.

    Args:
      x: [r, 1, d_model], the embedded token at position `step` of each row.
      step: int32 scalar, the position being decoded.
      cache: {"key": [r, L, h, d_k], "value": [r, L, h, d_v]}.
      history_index: int32 [r, L], flat index (row * L + position) into the
        cache of position p of row r's hypothesis; positions > step are never
        attended (causal mask) and may point anywhere valid.
      memory_kv: (keys, values) from `memory_key_values`, per sentence [b, s, h, d].
      memory_mask: [b, 1, 1, s] bool. Rows are grouped by sentence: r = b * k.
      horizons: None (attend over all L positions), or increasing static ints
        (`batching.doubling_horizons`): the self-attention reads only the
        positions < H, H the first horizon past `step`, so a step costs O(H)
        instead of O(L). One attention per horizon is compiled and a switch on
        `step` picks one inside the step: the rest of the step, and the search
        around it, are traced and compiled once (`_attended_widths`).
    Returns:
      ([r, 1, d_model], cache with position `step` of every row written).
    """

    new_cache = {}

    def self_attend(y):
      query = self.self_attention.project_query(y)
      key, value = self.self_attention.project_key_value(y)
      new_cache["key"] = _write_position(cache["key"], key, step)
      new_cache["value"] = _write_position(cache["value"], value, step)

      def attend_within(width):
        """Self-attention over the positions < width (None: the whole cache)."""
        index = history_index if width is None else history_index[:, :width]
        visible = ops.arange(index.shape[1] or ops.shape(index)[1]) <= step  # Causality.
        return self.self_attention.attend(
            query, _gather_history(new_cache["key"], index),
            _gather_history(new_cache["value"], index), visible[None, None, None])

      widths = _attended_widths(horizons, history_index.shape[1])
      if len(widths) == 1:
        return attend_within(widths[0])
      phase = ops.sum(ops.cast(step >= ops.convert_to_tensor(widths[:-1], "int32"), "int32"))
      return ops.switch(phase, [lambda width=width: attend_within(width) for width in widths])

    def cross_attend(y):
      query = self.cross_attention.project_query(y)
      return self.cross_attention.attend_grouped(query, *memory_kv, memory_mask)

    x = self._residual(x, self.self_norm, self.self_dropout_layer, self_attend, False)
    x = self._residual(x, self.cross_norm, self.cross_dropout_layer, cross_attend, False)
    x = self._residual(x, self.ffn_norm, self.ffn_dropout_layer,
                       lambda y: self.feed_forward(y, training=False), False)
    return x, new_cache


def _attended_widths(horizons, length):
  """The widths a cached step may read: the horizons worth a branch, then the whole cache.

  A horizon is worth its branch where it spares at least the first horizon's width of the
  cache: a switch inside the step costs a small step its own share (translation's input +
  50 in a buffer under twice the first horizon runs 6-10% faster over the whole buffer),
  while parsing's input + 300 keeps every doubling horizon. `length` is the cache's static
  length, or None where the search learns it only when it runs (an exported search): then
  every horizon is a slice, the last one at least as wide as any cache the search can meet
  (a slice past the end reads the whole cache).
  """
  if not horizons:
    return [None]
  if length is None:
    return list(horizons)
  return [h for h in horizons if length - h >= horizons[0]] + [None]


def _gather_history(cache, history_index):
  """cache [r, L, h, d], history_index [r, L] flat row * L + position -> [r, L, h, d]."""
  flat = ops.reshape(cache, (-1,) + tuple(cache.shape[2:]))  # [r * L, h, d]
  return ops.take(flat, history_index, axis=0)


def _write_position(cache, update, step):
  """cache [b, L, h, d] with update [b, 1, h, d] written at position `step`.

  Every row writes the same position, so this is one slice update (XLA's
  dynamic-update-slice), which a compiled loop does in place. The scatter with
  one index per row that it replaces cost more the longer the cache: at
  parsing's input + 300, a beam-21 step of 17 sentences took 68 ms with it
  and 55 ms without (compiled; bench/README.md, "Parsing decode, second pass").
  """
  return ops.slice_update(cache, (0, step, 0, 0), update)
