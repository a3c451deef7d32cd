"""t2tlite: the Transformer of "Attention Is All You Need" on TensorFlow 2 / Keras 3.

Problems live in `t2tlite.problems`, hyper-parameter sets in `t2tlite.hparams`
(both registered by name, see `t2tlite.registry`), the model in
`t2tlite.models`, and the stages in `t2tlite.training` and `t2tlite.decoding`.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # t2tlite needs tf.distribute and tf.data.

__version__ = "0.1.0"
