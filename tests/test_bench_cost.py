"""bench/cost_curves.py: its memory figure and its resumable driver.

The peak-RSS figure is checked against an allocation of known size; the driver against a
stand-in worker, so these tests take seconds, not the minutes a real base-shape point takes.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, load_script

BENCH = os.path.join(REPO, "bench")


def test_peak_rss_counts_an_allocation_of_known_size():
  """After writing 300 MiB on top of the current RSS, the peak is that much higher, and no more:
  the process is forked from this one (pytest, a large process), whose size it must not report."""
  code = """
import bench_util, numpy as np
with open("/proc/self/status") as f:
  rss = next(int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:"))
a = np.ones(300 * 2**20 // 8)
print(rss, bench_util.peak_rss_mb())
"""
  out = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True,
                       check=True).stdout.split()
  rss_before, peak = float(out[0]), float(out[1])
  assert rss_before + 295 <= peak <= rss_before + 340, (rss_before, peak)


class _FakeWorker:
  """Stands in for bench_util.run_worker: a result shaped like each worker's, from its flags."""

  def __init__(self):
    self.calls = []

  def __call__(self, cmd, args, env=None):
    self.calls.append(cmd)
    flags = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--") and "=" in a)
    if "train_throughput.py" in cmd[1]:
      batch, length = int(flags["batch"]), int(flags["tgt_len"])
      res = dict(batch=batch, tgt_len=length, tgt_tok_per_s=100.0,
                 median_step_s=batch * length / 100,
                 achieved_gflops=50.0, peak_rss_mb=1000.0 + batch * length / 10)
    else:
      res = dict(median_s=1.0, ms_per_loop_step=10.0, sent_per_s=2.0, peak_rss_mb=900.0)
    return dict(res, foreign_cores_during=0.0), None


def test_every_point_runs_once_and_a_rerun_resumes(tmp_path, monkeypatch, capsys):
  cost = load_script("bench/cost_curves.py")
  fake = _FakeWorker()
  monkeypatch.setattr(cost, "run_worker", fake)
  out = tmp_path / "cost.json"
  argv = ["--batch_tokens", "1024,4096", "--batch_length", "64", "--lengths", "64,128",
          "--length_tokens", "4096", "--decode_lengths", "8,16", "--output_json", str(out)]
  cost.main(cost.parse_args(argv))
  names = sorted(json.loads(out.read_text())["points"])
  # 4096 x 64 is on both curves: measured once.
  assert names == ["decode@16", "decode@8", "train@1024x64", "train@4096x128", "train@4096x64"]
  assert len(fake.calls) == 5
  assert any("--batch=16" in c and "--tgt_len=64" in c for c in fake.calls)  # 1024 // 64 rows.
  assert any("--batch=32" in c and "--tgt_len=128" in c for c in fake.calls)  # 4096 // 128.
  assert any("--no_early_eos=true" in c and "--decode_len=58" in c for c in fake.calls)
  table = capsys.readouterr().out
  assert "| 4096 | 128 | 32 | 100 |" in table

  # A killed run: one point lost. The rerun measures only that one.
  stored = json.loads(out.read_text())
  del stored["points"]["train@4096x128"]
  out.write_text(json.dumps(stored))
  fake.calls.clear()
  cost.main(cost.parse_args(argv))
  assert len(fake.calls) == 1 and "--tgt_len=128" in fake.calls[0]

  # Points measured under other settings are not mixed in.
  with pytest.raises(SystemExit, match="other settings"):
    cost.main(cost.parse_args(argv + ["--vocab", "8000"]))
