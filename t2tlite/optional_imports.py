"""TensorFlow's import, without the optional packages it loads for features t2tlite never calls.

`import tensorflow` (2.21) or `import keras` (3.15, which loads TensorFlow) imports four
optional packages when they are installed, each behind `try: import ... except ImportError`
and each for a feature no t2t command uses:

  jax                  TFLite's converter from JAX functions (`tensorflow.lite.python.util`)
  matplotlib(.pyplot)  Keras's `plot_image_gallery` (`keras.src.visualization`)
  IPython              Keras's notebook check (`keras.src.saving.file_editor`)
  scipy(.sparse)       legacy tf.keras's sparse-input check
                       (`tensorflow.python.keras.engine.training_arrays_v1`)

The first three together about 1.8 s of the 5-6 s each command spent importing TensorFlow on
one core (measured 2026-12-01: 5.1-6.2 s with them, 3.4-4.3 s without, one core, six runs
each), scipy 0.2-0.3 s more (2.6-3.3 s -> 2.6-3.0 s, four runs each), paid by every `t2t-*`
process. (`requests` cannot be skipped: TensorFlow's failure handling imports it unguarded.)
While TensorFlow or Keras loads, `skipped()` makes each of them raise ImportError (a None
entry in sys.modules, which is how Python spells "not importable"); afterwards they import
as usual, so `t2t-plot-curves` still draws with matplotlib and the JAX backend still finds
jax. When Keras itself runs on JAX (KERAS_BACKEND=jax), TensorFlow's import loads Keras and
Keras loads jax and scipy, so both are left alone.
"""

import contextlib
import os
import sys

SKIPPED_WHILE_TENSORFLOW_LOADS = ("jax", "matplotlib", "IPython", "scipy")
NEEDED_BY_KERAS_ON_JAX = ("jax", "scipy")


def _skippable(name: str) -> bool:
  if name in sys.modules:  # Already loaded by the caller: nothing to save, nothing to hide.
    return False
  return not (name in NEEDED_BY_KERAS_ON_JAX and os.environ.get("KERAS_BACKEND") == "jax")


@contextlib.contextmanager
def skipped(names=SKIPPED_WHILE_TENSORFLOW_LOADS):
  """Within the block, `import NAME` (and its submodules) raises ImportError for each name."""
  hidden = [name for name in names if _skippable(name)]
  for name in hidden:
    sys.modules[name] = None
  try:
    yield hidden
  finally:
    for name in hidden:
      if sys.modules.get(name, ...) is None:
        del sys.modules[name]
