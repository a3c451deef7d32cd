"""bench/train_throughput.py --backend jax: the JAX step's throughput bench runs where TensorFlow
is not installed (the GPU machines), at every length asked for, with the shared FLOP formula.

TensorFlow is made unimportable for the bench and its workers by a stand-in package first on
PYTHONPATH whose import fails, as on a machine without it.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, SHARED
from t2tlite import registry

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason="JAX is an optional extra: pip install -e '.[jax]'")


def _shared_flops():
  """../shared/peers/flops.py, the formula the peers' MFU figures use."""
  spec = importlib.util.spec_from_file_location("flops", os.path.join(SHARED, "peers", "flops.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@needs_jax
def test_jax_bench_runs_without_tensorflow_at_each_length(tmp_path):
  blocked = tmp_path / "no_tensorflow" / "tensorflow"
  blocked.mkdir(parents=True)
  (blocked / "__init__.py").write_text(
      'raise ImportError("No module named tensorflow", name="tensorflow")\n')
  out = tmp_path / "bench.json"
  peak = 0.5
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(blocked.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "bench", "train_throughput.py"), "--backend", "jax",
       "--shapes", "tiny", "--tiny_vocab", "64", "--lengths", "4,8", "--tokens_per_step", "32",
       "--warmup", "1", "--steps", "1", "--rounds", "1", "--torch_python", "",
       "--peak_tflops", str(peak), "--compare_flash", "--output_json", str(out)],
      capture_output=True, text=True, env=env, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  result = json.loads(out.read_text())
  flops = _shared_flops()
  hp = registry.hparams("transformer_tiny")
  for length in (4, 8):
    name = f"tiny@{length}"
    run = result["raw"][name]["ours"][0]
    assert "error" not in run, run
    assert run["backend"] == "jax" and run["tensorflow_loaded"] is False
    assert (run["batch"], run["src_len"], run["tgt_len"]) == (32 // length, length, length)
    assert run["traces"] == 1 and math.isfinite(run["last_loss"])
    # --compare_flash: the same step asking for a flash kernel; a CPU has none, so Keras runs
    # the XLA path and the first loss (same seed, same batch) is the same.
    flash = result["raw"][name]["ours_fp32_xla_on_flash"][0]
    assert "error" not in flash, flash
    assert flash["first_loss"] == pytest.approx(run["first_loss"], rel=1e-6)
    # The MFU column: the shared formula's FLOPs per step at this shape, over the step, over peak.
    expected_flops = flops.train_flops_per_step(32 // length, length, length, hp.d_model, hp.d_ff,
                                                hp.num_encoder_layers, hp.num_decoder_layers, 64)
    summary = result["summary"][name]
    assert summary["flops_per_step"] == expected_flops
    ours = summary["systems"]["ours"]
    assert ours["mfu"] == pytest.approx(
        expected_flops / run["median_step_s"] / 1e12 / peak, rel=1e-9)
