"""bench/train_throughput.py --backend jax: the JAX step's throughput bench runs where TensorFlow
is not installed (the GPU machines), at every length asked for, with the shared FLOP formula.

TensorFlow is made unimportable for the bench and its workers by a stand-in package first on
PYTHONPATH whose import fails, as on a machine without it.
"""

import gzip
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO, SHARED, load_script
from t2tlite import registry

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason="JAX is an optional extra: pip install -e '.[jax]'")


def _shared_flops():
  """../shared/peers/flops.py, the formula the peers' MFU figures use."""
  spec = importlib.util.spec_from_file_location("flops", os.path.join(SHARED, "peers", "flops.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _no_tensorflow_env(tmp_path):
  """PYTHONPATH with a stand-in `tensorflow` package whose import fails, as on the GPU machines."""
  blocked = tmp_path / "no_tensorflow" / "tensorflow"
  blocked.mkdir(parents=True, exist_ok=True)
  (blocked / "__init__.py").write_text(
      'raise ImportError("No module named tensorflow", name="tensorflow")\n')
  return dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(blocked.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


# Slow-marked (a JAX process per length, 46 s in CI's two-process run; --compare_flash two
# more): CI trains JAX steps without TensorFlow (tests/test_jax_training.py) and checks the
# summary's sums from a written trace (test_step_profile_sums_kernels_... below). Run
# `python -m pytest -m slow tests/test_bench_jax.py` before a GPU measurement.
@needs_jax
@pytest.mark.slow
@pytest.mark.parametrize("compare_flash", [True, False])
def test_jax_bench_runs_without_tensorflow_at_each_length(tmp_path, compare_flash):
  out = tmp_path / "bench.json"
  peak = 0.5
  env = _no_tensorflow_env(tmp_path)
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "bench", "train_throughput.py"), "--backend", "jax",
       "--shapes", "tiny", "--tiny_vocab", "64", "--lengths", "4,8", "--tokens_per_step", "32",
       "--warmup", "1", "--steps", "1", "--rounds", "1", "--torch_python", "",
       "--peak_tflops", str(peak), "--pipelined", "--output_json", str(out)] +
      (["--compare_flash"] if compare_flash else []),
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
    if compare_flash:
      flash = result["raw"][name]["ours_fp32_xla_on_flash"][0]
      assert "error" not in flash, flash
      assert flash["first_loss"] == pytest.approx(run["first_loss"], rel=1e-6)
    else:
      assert "ours_fp32_xla_on_flash" not in result["raw"][name]
    # The MFU column: the shared formula's FLOPs per step at this shape, over the step, over peak.
    expected_flops = flops.train_flops_per_step(32 // length, length, length, hp.d_model, hp.d_ff,
                                                hp.num_encoder_layers, hp.num_decoder_layers, 64)
    summary = result["summary"][name]
    assert summary["flops_per_step"] == expected_flops
    ours = summary["systems"]["ours"]
    assert ours["mfu"] == pytest.approx(
        expected_flops / run["median_step_s"] / 1e12 / peak, rel=1e-9)
    # --pipelined: the same steps timed back to back with one host sync, beside the main figure.
    assert run["pipelined_step_s"] > 0
    assert ours["pipelined_tgt_tok_per_s"] == pytest.approx(
        (32 // length) * length / run["pipelined_step_s"], rel=1e-9)
    assert ours["pipelined_mfu"] == pytest.approx(
        expected_flops / run["pipelined_step_s"] / 1e12 / peak, rel=1e-9)


# Slow-marked: CI runs the JAX step without TensorFlow (test_jax_bench_runs_...) and the
# summary's sums from a written trace (test_step_profile_sums_kernels_...).
@pytest.mark.slow
@needs_jax
def test_step_profile_traces_without_tensorflow(tmp_path):
  """bench/jax_step_profile.py trace: the GPU half runs where TensorFlow is not installed and
  leaves the timing, the trace and the step's optimized HLO; summarize then reads them (a CPU's
  XLA kernels are no device events, which it says)."""
  out = tmp_path / "profile"
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "bench", "jax_step_profile.py"), "trace",
       "--out", str(out), "--hparams_set", "transformer_tiny", "--vocab", "64", "--length", "8",
       "--tokens", "32", "--warmup", "1", "--timed_steps", "1", "--steps", "1"],
      capture_output=True, text=True, env=_no_tensorflow_env(tmp_path), timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  timing = json.loads((out / "timing.json").read_text())
  assert (timing["rows"], timing["length"], timing["vocab"]) == (4, 8, 64)
  assert timing["synced_step_s"] > 0 and timing["pipelined_step_s"] > 0
  assert timing["hlo_saved"] and (out / "trace.xplane.pb.gz").stat().st_size > 0
  assert "_train_step" in gzip.open(out / "step_hlo.txt.gz", "rt").read(2000)
  summary = subprocess.run(
      [sys.executable, os.path.join(REPO, "bench", "jax_step_profile.py"), "summarize", str(out)],
      capture_output=True, text=True, timeout=600)
  assert summary.returncode == 0, summary.stderr[-3000:]
  assert "no GPU plane" in summary.stdout
  assert "/host:CPU: events with the most time per step" in summary.stdout, summary.stdout
  # jit's call of the step, on the host.
  assert "PjitFunction(_train_step)" in summary.stdout, summary.stdout


def test_step_profile_sums_kernels_by_kind_and_model_part(tmp_path):
  """summarize on a hand-made trace: two steps on a GPU plane, kernels named as XLA and cuBLAS
  name them, fusions attributed through the HLO text's op names, and the host's events per
  step; the sums are worked out here."""
  jsp = load_script("bench/jax_step_profile.py")
  from tensorflow.tsl.profiler.protobuf import xplane_pb2
  hlo = "\n".join([
      'ENTRY %main {',
      '  %fusion.3 = f32[4] fusion(%p), kind=kLoop, metadata={op_name="jit(_train_step)/'
      'jvp(encoder_layer_0)/self_attention_norm/reduce_sum" stack_frame_id=1}',
      '  %loop_select_fusion = bf16[4] fusion(%p), kind=kLoop, metadata={op_name="jit(_train_step)/'
      'jvp(target_dropout)/select_n"}',
      '  %input_reduce_fusion.9 = f32[4] fusion(%p), kind=kInput, metadata={op_name="jit(_train_step)/'
      'jvp()/reduce_max"}',
      '  %gemm_fusion_dot.1 = bf16[4] fusion(%p), kind=kCustom, metadata={op_name="jit(_train_step)/'
      'jvp(decoder_layer_1)/cross_attention/query/dot_general"}',
      '  %loop_transpose_fusion = bf16[4] fusion(%p), kind=kLoop, metadata={op_name="jit(_train_step)/'
      'transpose(jvp(decoder_layer_1))/feed_forward/inner/transpose"}',
      '}'])
  # One step's kernels (name, microseconds); the second step repeats them after a 100 us gap.
  step = [("nvjet_sm90_tst_128x128", 300), ("fusion_3", 50), ("loop_select_fusion", 40),
          ("input_reduce_fusion_9", 30), ("gemm_fusion_dot_1", 120), ("loop_transpose_fusion", 10),
          ("MemcpyD2D", 5)]
  space = xplane_pb2.XSpace()
  plane = space.planes.add(name="/device:GPU:0")
  ids = {}
  for name, _ in step:
    ids[name] = len(ids) + 1
    plane.event_metadata[ids[name]].id = ids[name]
    plane.event_metadata[ids[name]].name = name
  compute = plane.lines.add(name="Stream #14(Compute)")
  copies = plane.lines.add(name="Stream #15(MemcpyH2D)")
  copies.events.add(metadata_id=ids["MemcpyD2D"], offset_ps=0, duration_ps=1_000_000)
  t = 0
  for _ in range(2):
    for name, us in step:
      compute.events.add(metadata_id=ids[name], offset_ps=t * 10**6, duration_ps=us * 10**6)
      t += us + 2  # 2 us between kernels
    t += 100 - 2
  host = space.planes.add(name="/host:CPU")
  for i, name in ((1, "PjitFunction(_train_step)"), (2, "cudaGraphLaunch")):
    host.event_metadata[i].id, host.event_metadata[i].name = i, name
  python, runtime = host.lines.add(name="python"), host.lines.add(name="runtime")
  for k in range(2):  # Two calls: 1000 us each, a 300 us launch inside each, on another thread.
    python.events.add(metadata_id=1, offset_ps=k * 5 * 10**9, duration_ps=1000 * 10**6)
    runtime.events.add(metadata_id=2, offset_ps=k * 5 * 10**9 + 10**8, duration_ps=300 * 10**6)
  path = tmp_path / "trace.xplane.pb"
  path.write_bytes(space.SerializeToString())
  assert jsp.host_events(str(path), steps=2) == {"/host:CPU": {
      "PjitFunction(_train_step)": dict(ms=pytest.approx(1.0), per_step=1.0),
      "cudaGraphLaunch": dict(ms=pytest.approx(0.3), per_step=1.0)}}
  s = jsp.summarize(str(path), hlo, steps=2)["/device:GPU:0"]
  assert s["stream"] == "Stream #14(Compute)" and s["kernels_per_step"] == len(step)
  busy_us = sum(us for _, us in step)
  assert s["busy_ms"] == pytest.approx(busy_us / 1e3)
  idle_us = 12 * 2 + 100  # Six 2 us gaps inside each step, 100 us between the two.
  assert s["span_ms"] == pytest.approx((2 * busy_us + idle_us) / 2 / 1e3)
  assert s["idle_ms"] == pytest.approx(idle_us / 2 / 1e3)
  assert s["by_kind"] == pytest.approx({
      "matmul (cuBLAS)": 0.300, "matmul (Triton fusion)": 0.120, "elementwise": 0.090,
      "reduction": 0.030, "transpose": 0.010, "copy": 0.005})
  assert s["by_part"] == pytest.approx({
      "matmul (cuBLAS)": 0.300, "attention": 0.120, "norm": 0.050, "dropout": 0.040,
      "loss": 0.030, "feed_forward": 0.010, "unattributed": 0.005})


# Slow-marked (one process compiling each variant's step, about a minute): CI runs the JAX
# bench's own step at each length above.
@needs_jax
@pytest.mark.slow
def test_step_variants_compare_in_one_process_without_tensorflow(tmp_path):
  """bench/jax_step_variants.py: every variant in one process, XLA options reaching that
  variant's step only (XLA's own dump of the options it compiled with), hparams variants on
  their own model, a step module's JaxTrainer used by its variant only, per-round ratios and
  MFU from the shared FLOP formula."""
  dump, out, peak = tmp_path / "dump", tmp_path / "variants.json", 0.5
  step_module, traced = tmp_path / "other_step.py", tmp_path / "traced.txt"
  aliased_sums = os.path.join(REPO, "bench", "jax_step_aliased_sums.py")
  step_module.write_text(textwrap.dedent(f"""
      from t2tlite.training import jax_step

      class JaxTrainer(jax_step.JaxTrainer):
        def _train_step(self, state, batch):
          with open({str(traced)!r}, "a") as f:
            f.write("traced\\n")
          return super()._train_step(state, batch)
      """))
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "bench", "jax_step_variants.py"),
       "--variant", "base", "--variant", f"level1:xla_backend_optimization_level=1,xla_dump_to={dump}",
       "--variant", "no_dropout:dropout=0.0", "--variant", f"other:step_module={step_module}",
       "--variant", f"aliased:step_module={aliased_sums}",
       "--hparams_set", "transformer_tiny", "--vocab", "64",
       "--length", "8", "--tokens", "32", "--warmup", "1", "--steps", "2", "--rounds", "2",
       "--peak_tflops", str(peak), "--output_json", str(out)],
      capture_output=True, text=True, env=_no_tensorflow_env(tmp_path), timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  result = json.loads(out.read_text())
  assert result["tensorflow_loaded"] is False and (result["rows"], result["length"]) == (4, 8)
  variants = result["variants"]
  assert list(variants) == ["base", "level1", "no_dropout", "other", "aliased"]
  assert variants["level1"]["xla_options"] == {"xla_backend_optimization_level": "1",
                                               "xla_dump_to": str(dump)}
  assert variants["no_dropout"]["hparams"] == "dropout=0.0"
  assert variants["other"]["step_module"] == str(step_module)
  assert variants["base"]["step_module"] == ""
  assert traced.read_text() == "traced\n"  # Its class traced its step once; no other did.
  # Only the level-1 variant's step was compiled with the options, and at level 1.
  [options] = dump.glob("*.debug_options")
  assert "_train_step" in options.name
  assert "xla_backend_optimization_level: 1" in options.read_text()
  hp = registry.hparams("transformer_tiny")
  flops = _shared_flops().train_flops_per_step(4, 8, 8, hp.d_model, hp.d_ff, hp.num_encoder_layers,
                                               hp.num_decoder_layers, 64)
  base = variants["base"]
  for res in variants.values():
    assert len(res["synced_s"]) == len(res["pipelined_s"]) == len(res["call_s"]) == 2
    assert all(0 < call <= step for call, step in zip(res["call_s"], res["synced_s"]))
    assert res["ratio_per_round"] == pytest.approx(
        [b / a for a, b in zip(res["synced_s"], base["synced_s"])])
    assert res["flops_per_step"] == flops
    assert res["synced_mfu"] == pytest.approx(
        flops / statistics.median(res["synced_s"]) / 1e12 / peak, rel=1e-9)
  assert base["ratio_per_round"] == [1.0, 1.0]
  assert "other" in proc.stdout
