"""Helpers every benchmark script shares: flags, the machine, host load, worker subprocesses.

Benchmarks run as scripts (`python bench/NAME.py`), so this module is imported
from the script's own directory. The host is shared and drifts, so every
measurement records how many cores *other* processes used while it ran
(/proc/stat busy time minus our own CPU time), and can first wait for quiet.
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time


def shared_dir() -> str:
  """The project's shared folder (data, peers): $T2TLITE_SHARED, else ../shared beside the checkout."""
  here = os.path.dirname(os.path.abspath(__file__))
  return os.environ.get("T2TLITE_SHARED") or os.path.join(os.path.dirname(os.path.dirname(here)),
                                                          "shared")


def shared_path(*parts: str) -> str:
  return os.path.join(shared_dir(), *parts)


def read_pairs(src, tgt):
  """(pairs, LineStats) of a parallel text (plain or .gz), empty pairs dropped as datagen does."""
  from t2tlite.data import parallel_text
  stats = parallel_text.LineStats()
  pairs = list(parallel_text.drop_empty(parallel_text.read_parallel(src, tgt), stats))
  return pairs, stats


def str2bool(v):
  if isinstance(v, bool):
    return v
  if v.lower() in ("1", "true", "yes", "on"):
    return True
  if v.lower() in ("0", "false", "no", "off"):
    return False
  raise argparse.ArgumentTypeError(f"expected true/false, got {v!r}")


def machine_info():
  model = ""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
    with open("/proc/cpuinfo") as f:
      flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
  except OSError:
    flags = []
  return dict(nproc=os.cpu_count(), cpu_model=model, platform=platform.platform(),
              python=platform.python_version(),
              cpu_flags_of_note=[x for x in flags if x in ("avx512f", "avx512_bf16", "amx_bf16",
                                                            "amx_tile", "avx512_vnni")])


def host_cpu_seconds():
  """(busy, steal) CPU-seconds of the whole host so far, from /proc/stat (all cores)."""
  try:
    with open("/proc/stat") as f:
      v = [int(x) for x in f.readline().split()[1:]]
  except OSError:
    return None
  hz = os.sysconf("SC_CLK_TCK")
  user, nice, system, idle, iowait, irq, softirq = v[:7]
  steal = v[7] if len(v) > 7 else 0
  return (user + nice + system + irq + softirq) / hz, steal / hz


def children_cpu_seconds():
  ru = resource.getrusage(resource.RUSAGE_CHILDREN)
  return ru.ru_utime + ru.ru_stime


def peak_rss_mb():
  """This process's peak resident set size so far, in MiB.

  The kernel's high-water mark (VmHWM in /proc/self/status), not ru_maxrss: a child's ru_maxrss
  starts at its parent's RSS at fork, so a worker forked from a big driver would report the
  driver's memory. ru_maxrss (KiB on Linux) only where /proc is missing.
  """
  try:
    with open("/proc/self/status") as f:
      return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
  except (OSError, StopIteration):
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def foreign_load(seconds=2.0):
  """Cores kept busy by other processes while this driver sleeps `seconds` (nothing of ours runs)."""
  a = host_cpu_seconds()
  time.sleep(seconds)
  b = host_cpu_seconds()
  return None if a is None or b is None else (b[0] - a[0]) / seconds


def wait_for_quiet(quiet_wait, quiet_cores, measure_without_wait=True):
  """Waits up to `quiet_wait` s for other processes to use < `quiet_cores` cores.

  Returns the last idle load measured (None if none was). With quiet_wait 0 the
  idle load is still measured once, unless `measure_without_wait` is False.
  """
  if quiet_wait <= 0 and not measure_without_wait:
    return None
  load = foreign_load()
  deadline = time.time() + quiet_wait
  while load is not None and load > quiet_cores and time.time() < deadline:
    load = foreign_load(5.0)
  return load


def last_json_line(text):
  for line in reversed(text.strip().splitlines()):
    line = line.strip()
    if line.startswith("{"):
      return json.loads(line)
  raise ValueError("no JSON line in worker output")


def run_worker(cmd, args, measure_without_wait=True, env=None):
  """Runs a measurement subprocess that prints one JSON line; (result dict, process).

  `env` adds variables to the subprocess's environment (a peer configured by them).
  Reads args.quiet_wait, args.quiet_cores, args.timeout, args.verbose. The
  result gains the wall time, the host load before and during the run, and
  the worker's CPU time; on failure it is {"error": ...} and "FAILED" or
  "TIMEOUT" has been printed (process None on timeout).
  """
  idle_load = wait_for_quiet(args.quiet_wait, args.quiet_cores, measure_without_wait)
  load_before = os.getloadavg()
  cpu0, child0 = host_cpu_seconds(), children_cpu_seconds()
  t0 = time.perf_counter()
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
             **(env or {}))
  try:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                          stderr=None if args.verbose else subprocess.PIPE,
                          text=True, timeout=args.timeout, env=env)
  except subprocess.TimeoutExpired:
    print(f" TIMEOUT after {args.timeout}s")
    return dict(error="timeout", cmd=cmd), None
  wall = time.perf_counter() - t0
  cpu1, child_cpu = host_cpu_seconds(), children_cpu_seconds() - child0
  # CPU the rest of the host used while the worker ran, in cores (host busy - worker's own CPU).
  foreign = None if cpu0 is None else max(0.0, (cpu1[0] - cpu0[0] - child_cpu) / wall)
  steal = None if cpu0 is None else (cpu1[1] - cpu0[1]) / wall
  if proc.returncode != 0:
    print(f" FAILED (rc {proc.returncode})")
    tail = (proc.stderr or "")[-3000:]
    print(tail, file=sys.stderr)
    return dict(error=f"rc {proc.returncode}", stderr_tail=tail, cmd=cmd), proc
  try:
    res = last_json_line(proc.stdout)
  except ValueError as e:
    print(f" FAILED ({e})")
    return dict(error=str(e), stdout_tail=proc.stdout[-3000:], cmd=cmd), proc
  # Other processes on the host skew a measurement; the load averages make that visible.
  res.update(wall_s=wall, cmd=cmd, loadavg_before=load_before, loadavg_after=os.getloadavg(),
             foreign_cores_before=idle_load, foreign_cores_during=foreign,
             steal_cores_during=steal, worker_cpu_s=child_cpu)
  return res, proc
