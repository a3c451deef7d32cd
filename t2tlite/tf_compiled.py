"""TensorFlow-compiled forms of functions of the keras.ops core (TF side only).

The core (t2tlite/layers, t2tlite/models) imports keras only, so that it runs
on every Keras backend; what is specific to TensorFlow, such as compiling a
single function with XLA, lives on this side of the arrow and imports the
core, never the other way round. The training and decoding steps are compiled
whole when `xla` is on (t2tlite/training/train_step.py, t2tlite/decoding/decoder.py);
these forms serve callers outside them: checking attention under 16-bit types,
and the loss of a train step that is not compiled whole (hparams `xla_loss`).
"""

import tensorflow as tf

from t2tlite.layers.attention import scaled_dot_product_attention
from t2tlite.training.losses import token_loss_sums

# Inside an already-compiled step it simply inlines; called from uncompiled
# code it is compiled once per shape.
xla_scaled_dot_product_attention = tf.function(scaled_dot_product_attention, jit_compile=True)

# The smoothed cross-entropy over the vocabulary and its written-out gradient,
# one XLA cluster per batch shape (forward and backward each). Uncompiled, each of
# its ops (cast, max, exp, sums, softmax - q) is a pass over [batch, length,
# vocab] float32; XLA fuses them into a few passes over the logits as they come
# (bfloat16 under mixed_bfloat16). bench/README.md has the measurement.
xla_token_loss_sums = tf.function(token_loss_sums, jit_compile=True)
