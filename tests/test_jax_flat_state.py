"""The JAX step's flat state: the arrays come back exactly, and an update is the same update.

`jax_step.FlatState` hands jit a few buffers instead of ~560 arrays; it must move
data only. Checked against the per-array layout it replaces: the same model and
batch, three updates with dropout on, bit-for-bit the same weights, moments, seed
states and metric sums (a subprocess: this process's Keras backend is TensorFlow's).
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                reason='jax is not installed (pip install -e ".[jax]")')


def test_flat_state_round_trips_every_dtype_and_shape():
  import jax.numpy as jnp

  from t2tlite.training.jax_step import FlatState
  rng = np.random.default_rng(0)
  arrays = [jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
            jnp.asarray(7, jnp.int32),  # A scalar (Adam's step count).
            jnp.asarray(rng.normal(size=(5,)), jnp.bfloat16),
            jnp.asarray([3, 4000000000], jnp.uint32),  # A seed generator's state.
            jnp.asarray(rng.normal(size=(2, 1, 3)), jnp.float32),
            jnp.zeros((0, 4), jnp.float32)]
  flat = FlatState(arrays)
  buffers = flat.pack(arrays)
  assert [b.dtype for b in buffers] == [jnp.float32, jnp.int32, jnp.bfloat16, jnp.uint32]
  assert [b.shape for b in buffers] == [(12 + 6,), (1,), (5,), (2,)]
  back = flat.unpack(buffers)
  for original, restored in zip(arrays, back):
    assert restored.dtype == original.dtype and restored.shape == original.shape
    np.testing.assert_array_equal(np.asarray(restored), np.asarray(original))
  with pytest.raises(ValueError, match="6"):
    flat.pack(arrays[:-1])


SAME_UPDATES = r"""
import json, sys
import numpy as np
import keras
from t2tlite import registry
from t2tlite.models.transformer import Transformer
from t2tlite.training.jax_step import JaxTrainer
from t2tlite.training.optimization import make_optimizer
hp = registry.hparams("transformer_tiny").replace(
    num_encoder_layers=1, num_decoder_layers=1, dropout=0.1, attention_dropout=0.1,
    relu_dropout=0.1, label_smoothing=0.1, learning_rate_warmup_steps=10,
    input_vocab_size=50, target_vocab_size=50)
keras.utils.set_random_seed(0)
model, optimizer = Transformer(hp), make_optimizer(hp)
optimizer.build(model.trainable_variables)
rng = np.random.default_rng(0)
batch = {"inputs": rng.integers(2, hp.input_vocab_size, (4, 9)).astype(np.int32),
         "targets": rng.integers(2, hp.target_vocab_size, (4, 7)).astype(np.int32)}
batch["targets"][1, 4:] = 0
flat, lists = JaxTrainer(model, optimizer, hp), JaxTrainer(model, optimizer, hp, flat_state=False)
assert len(flat.state) < 5 and len(sum(lists.state, [])) > 20, (len(flat.state), len(lists.state))
out = {}
for name, trainer in (("flat", flat), ("lists", lists)):
  sums = [{k: float(v) for k, v in trainer.train_step(batch).items()} for _ in range(3)]
  evals = {k: float(v) for k, v in trainer.eval_step(batch).items()}
  trainer.write_to_model()
  values = [np.asarray(v.value) for v in model.variables + optimizer.variables]
  np.savez(sys.argv[1] + name, *values)
  out[name] = {"sums": sums, "eval": evals, "iterations": trainer.iterations}
print(json.dumps(out))
"""


def test_flat_and_per_array_states_make_the_same_updates(tmp_path):
  env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="",
             TF_CPP_MIN_LOG_LEVEL="3",
             PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
  done = subprocess.run([sys.executable, "-c", SAME_UPDATES, str(tmp_path / "values_")],
                        env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.strip().splitlines()[-1])
  assert out["flat"] == out["lists"]
  assert out["flat"]["iterations"] == 3
  losses = [s["loss"] / s["tokens"] for s in out["flat"]["sums"]]
  assert losses[2] < losses[0]  # It trains.
  flat = np.load(tmp_path / "values_flat.npz")
  lists = np.load(tmp_path / "values_lists.npz")
  assert len(flat.files) == len(lists.files) > 20
  for key in flat.files:
    assert flat[key].dtype == lists[key].dtype
    np.testing.assert_array_equal(flat[key], lists[key], err_msg=key)
