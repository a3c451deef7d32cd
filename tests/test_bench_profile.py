"""bench/step_profile.py: where a training step's time goes, read from TensorFlow's profiler.

The profile itself takes minutes and is read in bench/README.md; here, what can fail a user
before that: the reader missing, and the grouping of the ops the CPU profile records.
"""

import os
import subprocess
import sys

from tests.helpers import REPO, load_script

SCRIPT = os.path.join(REPO, "bench", "step_profile.py")

# Runs the script as `python bench/step_profile.py` with `xprof` made unimportable.
WITHOUT_XPROF = """
import importlib.util, runpy, sys
find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "xprof" else find_spec(name, *a)
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_missing_profile_reader_is_one_line_and_exit_2_before_profiling():
  proc = subprocess.run([sys.executable, "-c", WITHOUT_XPROF, SCRIPT], capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.splitlines() == ["step_profile.py: error: reading the profile needs the "
                                      "xprof package (pip install xprof)"]
  assert proc.stdout == ""  # Nothing profiled.


def test_the_cpu_kernels_of_a_profiled_step_fall_in_their_groups():
  """The op types of a profile on an AVX-512 host (bench/README.md, 2026-11-30): oneDNN's
  kernels are matmuls, the 32-bit draws are dropout's, the fused Adam is the optimizer's."""
  profile = load_script("bench/step_profile.py")
  in_layer = "transformer/encoder/layer_0/self_attention/"
  assert profile.group_of("_MklMatMul", in_layer + "query/MatMul") == "matmul"
  assert profile.group_of("_MklBatchMatMulV2", in_layer + "einsum/Einsum") == "matmul"
  assert profile.group_of("StatelessRandomUniformFullIntV2", in_layer + "x") == "dropout"
  assert profile.group_of("ResourceApplyAdam", "Adam/update/ResourceApplyAdam") == "optimizer"
  assert profile.group_of("Cast", in_layer + "Cast") == "cast"
  assert profile.group_of("Mul", "transformer/encoder/layer_0/ffn_norm/mul") == "layer norm"
