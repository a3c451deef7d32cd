"""TensorFlow-compiled forms of functions of the keras.ops core (TF side only).

The core (t2tlite/layers, t2tlite/models) imports keras only, so that it runs
on every Keras backend; what is specific to TensorFlow, such as compiling a
single function with XLA, lives on this side of the arrow and imports the
core, never the other way round. The training and decoding steps are compiled
whole (t2tlite/training/train_step.py, t2tlite/decoding/decoder.py), so this
form serves callers outside them, e.g. checking attention under 16-bit types.
"""

import tensorflow as tf

from t2tlite.layers.attention import scaled_dot_product_attention

# Inside an already-compiled step it simply inlines; called from uncompiled
# code it is compiled once per shape.
xla_scaled_dot_product_attention = tf.function(scaled_dot_product_attention, jit_compile=True)
