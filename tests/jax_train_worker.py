"""Trains the tiny run under another Keras backend, for tests/test_jax_training.py.

    KERAS_BACKEND=jax python tests/jax_train_worker.py CONFIG.json

CONFIG holds a list of "runs", each {"output_dir", "steps", "options": {...},
"hparams": {...}, "split_sizes": {...} (of the tiny problem), "numpy_batches": DIR or null, "kill_at": step or null,
"logits": path or null}. Each run is a Trainer of tests/helpers.py's tiny run
(same problem and hparams, with the changes given) trained in this process;
"kill_at" sends this process SIGKILL right after the checkpoint of that step
is written and before its manifest (a real kill -9 mid-save); "logits"
writes the final model's logits on `fixed_batch` (backend_worker.py's
layout, ids below the problem's vocabulary) to an .npz.
"block_tensorflow": true makes `import tensorflow` fail, as on a machine
without it, and the run must then load no TensorFlow module.

Prints one json line per run: {"step", "checksum", "tensorflow_loaded"}.
"""

import importlib.abc
import importlib.machinery
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class BlockTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """`import tensorflow` (or any tensorflow.*) raises ImportError, as where it is not installed.

  Found, then failing to load: `importlib.util.find_spec` callers that only look
  (etils, under JAX's compilation cache) carry on; every import fails.
  """

  def find_spec(self, name, path=None, target=None):
    if name == "tensorflow" or name.startswith("tensorflow."):
      return importlib.machinery.ModuleSpec(name, self)
    return None

  def create_module(self, spec):
    raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)

  def exec_module(self, module):  # Never reached: create_module raised.
    raise ModuleNotFoundError(f"No module named {module.__name__!r}", name=module.__name__)


def fixed_batch(vocab):
  import numpy as np
  rng = np.random.RandomState(0)
  batch = {}
  for name, length, real in (("inputs", 7, (7, 4, 2)), ("targets", 5, (5, 3, 1))):
    ids = rng.randint(2, vocab, size=(3, length)).astype(np.int32)
    for row, n in enumerate(real):
      ids[row, n - 1] = 1
      ids[row, n:] = 0
    batch[name] = ids
  return batch


def inference_logits(model, batch):
  """The model's logits on `batch`, in one compiled call under JAX.

  An eager call under JAX compiles each op on its own: the module's JAX run (its fixture)
  took 23.5 s with this forward pass eager, 19.6 s jitted.
  """
  import keras
  if keras.config.backend() != "jax":
    return model(batch, training=False)
  import jax
  trainable = [v.value for v in model.trainable_variables]
  non_trainable = [v.value for v in model.non_trainable_variables]
  return jax.jit(lambda t, n: model.stateless_call(t, n, batch, training=False)[0])(
      trainable, non_trainable)


def train(run):
  import keras
  import numpy as np

  from t2tlite import registry
  from t2tlite.training import checkpoints
  from t2tlite.training.options import TrainOptions
  from t2tlite.training.trainer import Trainer
  from tests.helpers import TINY_RUN_HPARAMS, tiny_problem

  hp = registry.hparams("transformer_tiny").replace(**dict(TINY_RUN_HPARAMS, **run["hparams"]))
  if run.get("numpy_batches"):
    from t2tlite.training.numpy_batches import SavedBatches
    problem = SavedBatches(run["numpy_batches"])
  else:
    problem = tiny_problem()
    problem.split_sizes = run.get("split_sizes", problem.split_sizes)
  trainer = Trainer(problem, hp, run["output_dir"], options=TrainOptions(**run["options"]))
  if run.get("kill_at") is not None:
    from t2tlite.training import checkpoint_manifest
    write_manifest = checkpoint_manifest.write_manifest

    def die_before_manifest(prefix, paths=None):
      if checkpoint_manifest.step_of(prefix) == run["kill_at"]:
        os.kill(os.getpid(), signal.SIGKILL)  # The checkpoint's files are written, not its manifest.
      return write_manifest(prefix, paths)

    checkpoint_manifest.write_manifest = die_before_manifest
  trainer.train()
  if run.get("logits"):
    logits = inference_logits(trainer.model, fixed_batch(trainer.hparams.input_vocab_size))
    np.savez(run["logits"], logits=keras.ops.convert_to_numpy(logits))
  return {"step": trainer.step, "checksum": checkpoints.weights_checksum(trainer.model),
          "backend": keras.config.backend()}


def main(config_path):
  with open(config_path) as f:
    config = json.load(f)
  if config.get("block_tensorflow"):
    from t2tlite import cli  # noqa: F401 - its quiet-import finder goes first; ours before it.
    sys.meta_path.insert(0, BlockTensorFlow())
  from absl import logging
  logging.set_verbosity(logging.INFO)
  for run in config["runs"]:
    result = train(run)
    result["tensorflow_loaded"] = any(m == "tensorflow" or m.startswith("tensorflow.")
                                      for m in sys.modules)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
  main(sys.argv[1])
