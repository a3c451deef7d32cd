"""What several workers pay each step to stop together: distribution.StopAgreement's time.

Why
---
With --worker_hosts, every worker calls StopAgreement once after each training step (one
all-reduce of 67 float32 numbers: a one-hot of the stop signal each worker saw, and the
chief's early-stopping and --train_seconds verdicts), so that a signal to any worker, or the
chief's dev evaluation or clock, stops all of them after the same step. That call is pure
overhead on every step; this script times it between two workers on this machine, each pinned
to one core with one thread, as the two-worker training runs in bench/README.md were.

    python bench/stop_agreement.py --calls 200

Prints the median, minimum and 90th percentile over --calls calls (after 5 untimed), timed on
worker 0. Linux only (`taskset`).
"""

import json
import os
import socket
import subprocess
import sys
import time

from absl import app, flags

flags.DEFINE_integer("calls", 200, "Timed calls.")
flags.DEFINE_integer("task_index", -1, "Internal: the worker this process is (-1: start both).")
flags.DEFINE_string("worker_hosts", "", "Internal: both workers' host:port.")
FLAGS = flags.FLAGS


def run_worker() -> None:
  os.environ["TF_CONFIG"] = json.dumps({
      "cluster": {"worker": FLAGS.worker_hosts.split(",")},
      "task": {"type": "worker", "index": FLAGS.task_index}})
  import tensorflow as tf
  from t2tlite.training import distribution
  agree = distribution.StopAgreement(tf.distribute.MultiWorkerMirroredStrategy())
  for _ in range(5):  # The first call traces the all-reduce.
    agree(None, False, False)
  seconds = []
  for _ in range(FLAGS.calls):
    started = time.perf_counter()
    assert agree(None, False, False) == (None, False, False)
    seconds.append(time.perf_counter() - started)
  seconds.sort()
  if FLAGS.task_index == 0:
    print(f"StopAgreement, 2 workers on one core each: {FLAGS.calls} calls, median "
          f"{1000 * seconds[len(seconds) // 2]:.2f} ms, min {1000 * seconds[0]:.2f}, 90th "
          f"percentile {1000 * seconds[int(0.9 * len(seconds))]:.2f}")


def start_both() -> int:
  sockets = [socket.socket() for _ in range(2)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  hosts = ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in sockets)
  for s in sockets:
    s.close()
  env = dict(os.environ, TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1",
             TF_CPP_MIN_LOG_LEVEL="2")
  workers = [subprocess.Popen(["taskset", "-c", str(index), sys.executable, __file__,
                               f"--task_index={index}", f"--worker_hosts={hosts}",
                               f"--calls={FLAGS.calls}"], env=env) for index in range(2)]
  return max(worker.wait() for worker in workers)


def main(argv):
  del argv
  if FLAGS.task_index < 0:
    sys.exit(start_both())
  run_worker()


if __name__ == "__main__":
  app.run(main)
