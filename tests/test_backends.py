"""One model, every Keras backend: the keras.ops core gives TensorFlow's numbers under JAX.

Each backend runs in its own subprocess (a process has one Keras backend), from
the same weights saved by Keras path; float32 on CPU. JAX is the optional extra
`pip install -e ".[jax]"` (in the "test" extra); without it these tests skip.
"""

import importlib.util

import numpy as np
import pytest

from tests.helpers import backend_python

CORE_MODULES = ("t2tlite.models.transformer", "t2tlite.layers.attention",
                "t2tlite.layers.embedding", "t2tlite.layers.transformer_layers",
                "t2tlite.training.losses", "t2tlite.training.optimization")

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason='jax is not installed (pip install -e ".[jax]")')


@needs_jax
def test_the_core_and_the_lookup_of_sets_and_models_import_no_tensorflow_under_jax():
  """The problems load TensorFlow; a set or model looked up by name must not load them."""
  code = ("import sys\n"
          + "".join(f"import {m}\n" for m in CORE_MODULES)
          + "import keras\n"
          + "from t2tlite import registry\n"
          + "registry.hparams('transformer_tiny'), registry.model('transformer')\n"
          + "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow')\n"
          + "print(keras.config.backend(), len(loaded), loaded[:3])\n")
  assert backend_python("jax", code=code).split()[:2] == ["jax", "0"]


@needs_jax
def test_tensorflow_and_jax_give_the_same_logits_loss_and_gradients(tmp_path):
  weights = str(tmp_path / "weights.npz")
  out = {}
  for backend in ("tensorflow", "jax"):  # TensorFlow writes the weights, JAX loads them by path.
    path = str(tmp_path / f"{backend}.npz")
    printed = backend_python(backend, weights, path)
    assert f"backend={backend}" in printed
    if backend == "jax":
      assert "tensorflow_loaded=False" in printed
    out[backend] = dict(np.load(path))
  tf_out, jax_out = out["tensorflow"], out["jax"]
  assert sorted(tf_out) == sorted(jax_out)
  # The batch has source and target padding; the causal mask applies throughout.
  np.testing.assert_allclose(jax_out["logits"], tf_out["logits"], rtol=0, atol=1e-5)
  np.testing.assert_allclose(jax_out["loss"], tf_out["loss"], rtol=1e-6)
  grads = [k for k in tf_out if k.startswith("grad:")]
  assert len(grads) > 20  # Every trainable weight of the tiny model.
  far = []  # Every weight outside the tolerance, so a failure shows whether one or all differ.
  for name in grads:
    scale = np.abs(tf_out[name]).max()
    assert scale > 0, f"{name}: zero gradient, the comparison would be empty"
    error = np.abs(jax_out[name] - tf_out[name]).max()
    if error > 1e-4 * scale:
      far.append(f"{name}: max |jax - tf| = {error:.3g}, max |tf| = {scale:.3g}")
  assert not far, f"{len(far)} of {len(grads)} gradients differ: " + "; ".join(far)


@needs_jax
def test_symbol_dropout_under_jax_pads_the_rate_inside_a_compiled_call():
  """The layer's keras.random draws work in a jitted stateless call: the rate of 2^18 real ids
  within 5 binomial standard deviations, padding kept, and the model's jitted training call
  finite (compiled as the JAX trainer's step is; op by op, JAX compiles each op on its own)."""
  code = (
      "import jax, keras, numpy as np\n"
      "from t2tlite.layers.dropout import SymbolDropout\n"
      "from t2tlite.models.transformer import Transformer\n"
      "from tests.helpers import tiny_hparams\n"
      "layer = SymbolDropout(0.25, seed=2)\n"
      "ids = np.random.RandomState(0).randint(1, 50, size=(512, 512)).astype('int32')\n"
      "ids[:, 400:] = 0\n"
      "call = jax.jit(lambda s, x: layer.stateless_call([], s, x, training=True))\n"
      "out, _ = call([v.value for v in layer.non_trainable_variables], ids)\n"
      "out = np.asarray(out); real = ids != 0\n"
      "kept_same = bool((out[out != 0] == ids[out != 0]).all())\n"
      "model = Transformer(tiny_hparams(symbol_dropout=0.25))\n"
      "src = np.array([[5, 6, 7, 1]], 'int32'); tgt = np.array([[3, 4, 1]], 'int32')\n"
      "weights = [[v.value for v in vs] for vs in (model.trainable_variables,\n"
      "                                           model.non_trainable_variables)]\n"
      "train_call = lambda t, n: model.stateless_call(t, n, {'inputs': src, 'targets': tgt},\n"
      "                                               training=True)[0]\n"
      "logits = jax.jit(train_call)(*weights)\n"
      "print(keras.config.backend(), ((out == 0) & real).sum() / real.sum(), real.sum(),\n"
      "      bool((out[~real] == 0).all()), kept_same, bool(np.isfinite(np.asarray(logits)).all()))\n")
  backend, fraction, real, pads_kept, kept_same, finite = backend_python("jax", code=code).split()
  sigma = np.sqrt(0.25 * 0.75 / int(real))
  assert backend == "jax" and abs(float(fraction) - 0.25) < 5 * sigma
  assert pads_kept == kept_same == finite == "True"
