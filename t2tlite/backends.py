"""Which Keras backend a command trains on, chosen before keras is imported.

Keras reads `KERAS_BACKEND` once, at its first import, and a process keeps that
backend for good. So `t2t-trainer --backend=jax` sets the variable before
anything imports keras (the command's flags are parsed before the registry
loads the model), and a caller that already imported keras on another backend
gets one line saying so instead of a model built on the wrong one.

TensorFlow is the default and runs everything; JAX trains the same model
(t2tlite/training/jax_step.py) and needs TensorFlow only for tf.data and
checkpoint files, both of which have numpy stand-ins where it is not
installed (t2tlite/training/numpy_batches.py, t2tlite/training/npz_checkpoints.py).
No keras and no TensorFlow are imported here.
"""

import os
import sys
from typing import Optional

from t2tlite.errors import UserError

TENSORFLOW, JAX = "tensorflow", "jax"
CHOICES = (TENSORFLOW, JAX)


class BackendError(UserError):
  """An unknown backend, or one that disagrees with the keras already imported."""


def check_choice(backend: str, flag: str = "--backend") -> str:
  """`backend` if it is one t2tlite trains on ("" stands for the default), else one line."""
  if backend and backend not in CHOICES:
    raise BackendError(f"{flag}={backend}: must be one of {', '.join(CHOICES)} (the model "
                       "core is keras.ops, but only these two have a train step here)")
  return backend


def keras_backend_loaded() -> Optional[str]:
  """The backend of the keras this process already imported, or None before keras loads."""
  if "keras" not in sys.modules:
    return None
  import keras
  return keras.config.backend()


def select(backend: str, flag: str = "--backend") -> str:
  """Makes `backend` the one keras loads, or checks the one it loaded; returns it.

  "" stands for the keras already imported, else $KERAS_BACKEND, else
  tensorflow. Call before keras is imported to choose; afterwards a named
  backend must be the loaded one.
  """
  loaded = keras_backend_loaded()
  if backend:
    wanted = check_choice(backend, flag)
  else:
    wanted = check_choice(loaded or os.environ.get("KERAS_BACKEND") or TENSORFLOW,
                          "KERAS_BACKEND")
  if loaded is not None and loaded != wanted:
    raise BackendError(f"{flag}={wanted} but keras was already imported with the {loaded} "
                       f"backend; set KERAS_BACKEND={wanted} before keras is imported")
  os.environ["KERAS_BACKEND"] = wanted
  return wanted


def tensorflow_available() -> bool:
  """Whether TensorFlow imports here (the GPU machines have JAX only)."""
  try:
    import tensorflow  # noqa: F401
  except ImportError:
    return False
  return True
