"""One model, every Keras backend: the keras.ops core gives TensorFlow's numbers under JAX.

Each backend runs in its own subprocess (a process has one Keras backend), from
the same weights saved by Keras path; float32 on CPU. JAX is the optional extra
`pip install -e ".[jax]"` (in the "test" extra); without it these tests skip.
"""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO

WORKER = os.path.join(REPO, "tests", "backend_worker.py")
CORE_MODULES = ("t2tlite.models.transformer", "t2tlite.layers.attention",
                "t2tlite.layers.embedding", "t2tlite.layers.transformer_layers",
                "t2tlite.training.losses", "t2tlite.training.optimization")

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason='jax is not installed (pip install -e ".[jax]")')


def _python(backend, *args, code=None):
  # ONEDNN_DEFAULT_FPMATH_MODE=STRICT: float32 matmuls in float32 on every host; oneDNN may
  # otherwise compute them in bfloat16 on CPUs that have bf16 units (backend_worker.py).
  env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="",
             ONEDNN_DEFAULT_FPMATH_MODE="STRICT", PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
  command = [sys.executable] + (["-c", code] if code else [WORKER]) + list(args)
  proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


@needs_jax
def test_the_core_imports_no_tensorflow_under_jax():
  code = ("import sys\n"
          + "".join(f"import {m}\n" for m in CORE_MODULES)
          + "import keras\n"
          + "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow')\n"
          + "print(keras.config.backend(), len(loaded), loaded[:3])\n")
  assert _python("jax", code=code).split()[:2] == ["jax", "0"]


@needs_jax
def test_tensorflow_and_jax_give_the_same_logits_loss_and_gradients(tmp_path):
  weights = str(tmp_path / "weights.npz")
  out = {}
  for backend in ("tensorflow", "jax"):  # TensorFlow writes the weights, JAX loads them by path.
    path = str(tmp_path / f"{backend}.npz")
    printed = _python(backend, weights, path)
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
