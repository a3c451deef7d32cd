"""The key each variable of a model is checkpointed under, and its value as numpy.

Shared by both checkpoint formats, TensorFlow's (checkpoints.py) and the
.npz written without TensorFlow (npz_checkpoints.py), so that a run saved
in one is read by the other under the same keys. Why paths and not Keras's
object graph: see checkpoints.py.
"""

import numpy as np

RNG_PREFIX = "rng_state_"


def named_variables(model) -> dict:
  """{key: variable} of every variable of `model`: weights by Keras path, then rng_state_<i>."""
  weights = model.weights
  weight_ids = {id(w) for w in weights}
  rng_states = [v for v in model.variables if id(v) not in weight_ids]
  named = {w.path: w for w in weights}
  if len(named) != len(weights):
    raise ValueError("model has duplicate weight paths; checkpoint keys would collide")
  named.update({f"{RNG_PREFIX}{i}": v for i, v in enumerate(rng_states)})
  return named


def to_numpy(variable) -> np.ndarray:
  """A Keras variable's value as a numpy array, on any backend."""
  import keras
  return np.asarray(keras.ops.convert_to_numpy(variable.value))
