"""bench/step_profile.py: where a training step's time goes, read from TensorFlow's profiler.

The profile itself takes minutes and is read in bench/README.md; here, what can fail a user
before that: the reader missing, the grouping of the ops the CPU profile records, and the
split of the steps' wall time read from the trace's timeline.
"""

import collections
import os
import random
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


def test_the_wall_split_is_the_brute_force_split_of_every_microsecond():
  """wall_shares against a count of each microsecond of the spans: a matmul running takes the
  instant; otherwise the groups running share it evenly; nothing running is idle."""
  profile = load_script("bench/step_profile.py")
  rng = random.Random(7)
  groups = ("matmul", "dropout", "layer norm", "loss over V")
  intervals = []
  for _ in range(60):
    start = rng.randrange(0, 400)
    intervals.append((rng.choice(groups), start, start + rng.randrange(1, 30)))
  spans = [(5, 180), (200, 420)]  # Ops before, between and after the spans are clipped away.
  expected = collections.Counter()
  for span_start, span_end in spans:
    for now in range(span_start, span_end):
      active = {group for group, start, end in intervals if start <= now < end}
      if "matmul" in active:
        expected["matmul"] += 1
      elif active:
        for group in active:
          expected[group] += 1 / len(active)
      else:
        expected["idle"] += 1
  wall = profile.wall_shares(intervals, spans)
  assert set(wall) == set(expected)
  assert all(abs(wall[g] - expected[g]) < 1e-9 for g in expected), (wall, expected)
  assert abs(sum(wall.values()) - (175 + 220)) < 1e-9
  assert expected["idle"] > 0 and expected["dropout"] > 0  # The draw exercises every case.


def test_the_timeline_reads_ops_xla_runs_and_step_spans_from_the_trace():
  """read_timeline keeps the events that name a TensorFlow op ("name:type"), the XLA runs
  (the loss) and the step annotations; the executor's wrapper events are not ops."""
  profile = load_script("bench/step_profile.py")
  layer = "StatefulPartitionedCall/transformer/encoder_layer_0/"
  trace = {"traceEvents": [
      {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "tf_Compute/1"}},
      {"ph": "X", "name": profile.STEP_EVENT + " 0", "ts": 0, "dur": 100, "args": {}},
      {"ph": "X", "name": "ExecutorState::Process", "ts": 1, "dur": 90, "args": {}},
      {"ph": "X", "name": "_MklMatMul", "ts": 2, "dur": 10,
       "args": {"long_name": layer + "feed_forward/inner/Tensordot/MatMul:_MklMatMul"}},
      {"ph": "X", "name": "Mul", "ts": 20, "dur": 5,
       "args": {"long_name": layer + "feed_forward/dropout_1/mul_1:Mul"}},
      {"ph": "X", "name": profile.XLA_RUN_EVENT, "ts": 30, "dur": 8, "args": {}},
      {"ph": "X", "name": "ParallelFor", "ts": 31, "dur": 3, "args": {"total": "9"}},
  ]}
  intervals, spans = profile.read_timeline(trace["traceEvents"])
  assert spans == [(0.0, 100.0)]
  assert intervals == [("matmul", 2.0, 12.0), ("dropout", 20.0, 25.0), ("loss over V", 30.0, 38.0)]
  assert profile.wall_shares(intervals, spans) == {"matmul": 10.0, "dropout": 5.0,
                                                   "loss over V": 8.0, "idle": 77.0}
  assert profile.read_xla_cluster_time(trace["traceEvents"]) == [("XLA cluster", "loss (xla_loss)",
                                                                 8.0)]
  table = profile.wall_table(profile.wall_shares(intervals, spans), steps=1)
  assert list(table) == list(profile.GROUPS) + ["idle"]
  assert table["loss over V"] == {"share": 0.08, "ms_per_step": 0.008}
  assert abs(sum(row["share"] for row in table.values()) - 1.0) < 1e-12
