"""Dropout (Section 5.4) whose keep mask is drawn from 16 random bits per element.

Why not `keras.layers.Dropout` as it is: under TensorFlow it calls
`tf.nn.experimental.stateless_dropout`, which draws one uniform number *of the
input's dtype* per element and drops where it is below the rate. Under
mixed_bfloat16 the inputs are bfloat16, whose uniform numbers take only 128
values (7 mantissa bits), so rate 0.1 drops 13/128 = 10.16% of the units, not
10%; and each draw costs one 32-bit Philox output plus a conversion to float,
about 4% of a base training step on a CPU (bench/README.md).

Here, under TensorFlow, one 32-bit Philox output gives two 16-bit draws and a
unit is dropped when its draw is below round(rate * 2^16): the rate is exact to
2^-16 whatever the dtype (0.1 drops 6554/65536 = 0.100006), and the random bits
cost half. Kept units are scaled by 1 / (1 - rate), as the paper's inverted
dropout. Other backends keep Keras's own dropout (JAX draws float32 uniforms
inside its compiled step, where they are cheap).

`SymbolDropout` is tensor2tensor's `symbol_dropout`: whole tokens, not units.
"""

import keras
from keras import ops

from t2tlite.constants import PAD_ID

_BITS = 16


class Dropout(keras.layers.Dropout):
  """keras.layers.Dropout with 16-bit keep masks under TensorFlow (see the module doc)."""

  def call(self, inputs, training=False):
    if (not training or self.rate <= 0.0 or self.rate >= 1.0 or self.noise_shape is not None
        or keras.config.backend() != "tensorflow"):
      return super().call(inputs, training=training)
    keep = keep_mask(inputs, self.rate, self.seed_generator.next())
    # One factor per unit, 0 or 1 / (1 - rate), from the seed and the shape alone: the data's
    # path holds one multiply forward and one backward (two each as x * mask * scale), with
    # the same results bit for bit (x * 1 and x * 0 are exact, so either way rounds once).
    factor = ops.where(keep, ops.cast(1.0 / (1.0 - self.rate), inputs.dtype),
                       ops.cast(0.0, inputs.dtype))
    return inputs * factor


def keep_mask(x, rate, seed):
  """Bool tensor shaped as `x`, each element True with probability 1 - round(rate * 2^16) / 2^16.

  TensorFlow only: `seed` is a [2] integer tensor (a SeedGenerator's draw), and
  the mask is a pure function of it and of x's shape. Two 16-bit draws come from
  each 32-bit word of TF's stateless Philox stream, in the flattened tensor's
  order; an odd-sized tensor leaves the last word's second half unused.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel  # TF backend only.
  # As Keras's own TF dropout: XLA wants int32 seeds, the SeedGenerator holds int64.
  seed = tf.cast(tf.math.floormod(tf.cast(seed, tf.int64), tf.int32.max - 1), tf.int32)
  threshold = tf.constant(round(rate * 2 ** _BITS), tf.uint16)
  size = tf.size(x)
  words = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None,
                                      dtype=tf.uint32)
  draws = tf.reshape(tf.bitcast(words, tf.uint16), [-1])  # [2 * words]
  if x.shape[-1] is None or x.shape[-1] % 2:  # Every dropout site of the model has an even width.
    draws = draws[:size]
  return tf.reshape(draws, tf.shape(x)) >= threshold


class SymbolDropout(keras.layers.Layer):
  """In training, each real token id becomes PAD_ID with probability `rate` (t2t's symbol_dropout).

  tensor2tensor's symbol modality turns dropped ids into its pad id 0, unscaled,
  before the embedding lookup (`dropout_no_scaling` in `bottom_simple`), on the
  source and on the target side. A dropped source token then counts as padding
  wherever padding is read from the ids: t2t reads the encoder's padding from
  all-zero embeddings, here `padding_mask` reads it from the dropped ids, so the
  word leaves the encoder's and the decoder's attention alike (packed rows take
  their masks from segment ids, as t2t's do, so there it stays). A dropped decoder
  input reads PAD_ID's embedding row, this model's start symbol (t2t's pad row
  is zero). Labels and loss are never touched. Written in keras.random: every
  backend; a pure function of the layer's seed state and the ids' shape.
  """

  def __init__(self, rate, seed=None, **kwargs):
    super().__init__(**kwargs)
    self.rate = rate
    self.seed_generator = keras.random.SeedGenerator(seed)
    self.built = True

  def call(self, ids, training=False):
    if not training or self.rate <= 0.0:
      return ids
    draws = keras.random.uniform(ops.shape(ids), seed=self.seed_generator)
    return ops.where(ops.greater_equal(draws, self.rate), ids, ops.cast(PAD_ID, ids.dtype))

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    return {**super().get_config(), "rate": self.rate}
