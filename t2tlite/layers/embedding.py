"""Token embeddings with the paper's weight tying, and positional encodings.

Section 3.4: one matrix serves the source embedding, the target embedding and
the pre-softmax projection, and embeddings are multiplied by sqrt(d_model).
Section 3.5: sinusoidal encodings, or learned ones (Table 3 row E).
Written in keras.ops: no TensorFlow import, every Keras backend.
"""

import math

import keras
from keras import ops


class SharedEmbedding(keras.layers.Layer):
  """ids -> embeddings * sqrt(d_model); with `reverse=True`, vectors -> logits.

  Calling the same layer in both directions is how the functional model ties
  the target embedding to the pre-softmax projection (as KerasHub's
  ReversibleEmbedding does). Logits come in the layer's compute dtype, as
  every layer's output: the loss casts them to float32 inside its compiled
  cluster, where the cast and its gradient's cast back fuse into the loss's own
  passes over [b, t, vocab] instead of two more (bench/README.md, "The logits
  cast inside the loss").
  The table is initialised N(0, d_model^-0.5) so scaled embeddings have unit
  variance, as in tensor2tensor.

  Under a mixed policy the float32 table is not autocast: Keras would cast the
  whole [vocab, d_model] table at every call, three times a step when one
  matrix serves source, target and softmax (at vocab 37000, two casts of 19M
  values more than needed; the lookups' gradients are sparse either way, so
  only the projection's is cast back whole). A lookup gathers the
  float32 rows and casts only them (the same values: the cast is
  elementwise), and the projection casts the table once.
  """

  def __init__(self, vocab_size, d_model, scale=True, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size = vocab_size
    self.d_model = d_model
    self.scale = scale

  def build(self, input_shape=None):
    self.embeddings = self.add_weight(
        name="embeddings", shape=(self.vocab_size, self.d_model),
        initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5),
        autocast=False)

  def call(self, inputs, reverse=False):
    if reverse:  # [..., d_model] -> [..., vocab]
      return self._project(inputs, ops.cast(self.embeddings, self.compute_dtype))
    vectors = ops.cast(ops.take(self.embeddings, inputs, axis=0), self.compute_dtype)
    if self.scale:
      vectors = vectors * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
    return vectors

  def _project(self, inputs, table):
    """inputs @ table^T as one 2-D matmul over every position.

    Flattened first because TensorFlow runs a [b, t, d] x [d, V] product as a
    broadcast batch matmul whose table gradient is b separate [d, V] products
    summed afterwards (keras.ops.einsum("btd,vd->btv") lowers to that): at
    vocab 37000 the base step ran at 0.61x. One [b*t, d] x [d, V] product is
    what tf.einsum did before the keras.ops core; XLA (JAX) sees the same.
    """
    leading = ops.shape(inputs)[:-1]
    flat = ops.reshape(inputs, (-1, self.d_model))
    logits = ops.matmul(flat, ops.transpose(table))
    return ops.reshape(logits, tuple(leading) + (self.vocab_size,))

  def compute_output_spec(self, inputs, reverse=False):
    if reverse:
      return keras.KerasTensor(tuple(inputs.shape[:-1]) + (self.vocab_size,), self.compute_dtype)
    return keras.KerasTensor(tuple(inputs.shape) + (self.d_model,), self.compute_dtype)

  def get_config(self):
    config = super().get_config()
    config.update(vocab_size=self.vocab_size, d_model=self.d_model, scale=self.scale)
    return config


def sinusoid_encoding(positions, d_model):
  """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...).

  positions: [length] int or float -> [length, d_model] float32. Computed, not
  looked up, so there is no maximum length.
  """
  position = ops.expand_dims(ops.cast(positions, "float32"), 1)  # [L, 1]
  two_i = ops.arange(0, d_model, 2, dtype="float32")  # [ceil(d/2)]
  angle = position / ops.power(10000.0, two_i / d_model)  # [L, ceil(d/2)]
  interleaved = ops.stack([ops.sin(angle), ops.cos(angle)], axis=-1)  # [L, ceil(d/2), 2]
  return ops.reshape(interleaved, (ops.shape(position)[0], -1))[:, :d_model]


def _sinusoid_per_row(positions, d_model):
  """int [b, t] positions (each row its own) -> [b, t, d_model] float32."""
  shape = ops.shape(positions)
  table = sinusoid_encoding(ops.reshape(positions, (-1,)), d_model)  # [b * t, d]
  return ops.reshape(table, (shape[0], shape[1], d_model))


def _positions(inputs, start_index):
  """start_index + [0, 1, ..., length - 1]; static-length range, so XLA compiles it."""
  length = inputs.shape[1] if inputs.shape[1] is not None else ops.shape(inputs)[1]
  return start_index + ops.arange(length)


class SinusoidalPositionEncoding(keras.layers.Layer):
  """x [b, t, d] -> x + PE[start_index : start_index + t], or x + PE[positions].

  `positions` (int [b, t], or None): each token's own position, for packed
  rows where positions restart at 0 with every pair (tensor2tensor's
  `add_timing_signal_1d_given_position`); it replaces `start_index`.
  """

  def call(self, inputs, start_index=0, positions=None):
    if positions is not None:
      return inputs + ops.cast(_sinusoid_per_row(positions, inputs.shape[-1]), inputs.dtype)
    table = sinusoid_encoding(_positions(inputs, start_index), inputs.shape[-1])
    return inputs + ops.expand_dims(ops.cast(table, inputs.dtype), 0)

  def compute_output_shape(self, input_shape):
    return input_shape


class LearnedPositionEmbedding(keras.layers.Layer):
  """x [b, t, d] -> x + P[start_index : start_index + t] with a trained table (row E).

  `positions` (int [b, t], or None): per-token rows of P (packed rows), in
  place of `start_index`; they must be < max_position.
  """

  def __init__(self, max_position, **kwargs):
    super().__init__(**kwargs)
    self.max_position = max_position

  def build(self, input_shape):
    self.positions = self.add_weight(
        name="positions", shape=(self.max_position, input_shape[-1]),
        initializer=keras.initializers.RandomNormal(stddev=input_shape[-1] ** -0.5))

  def call(self, inputs, start_index=0, positions=None):
    if positions is not None:  # [b, t] -> [b, t, d]
      return inputs + ops.take(ops.cast(self.positions, inputs.dtype), positions, axis=0)
    positions = _positions(inputs, start_index)
    length = inputs.shape[1]
    if (isinstance(start_index, int) and length is not None
        and start_index + length > self.max_position):
      raise ValueError(f"sequence of {start_index + length} positions is longer than the learned "
                       f"position table (hparam max_position={self.max_position})")
    table = ops.take(ops.cast(self.positions, inputs.dtype), positions, axis=0)
    return inputs + ops.expand_dims(table, 0)

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update(max_position=self.max_position)
    return config
