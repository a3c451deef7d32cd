"""Which devices and machines train together, and what follows from that.

* One device: TensorFlow's default strategy; the whole update (gradients,
  optimizer) is one XLA cluster.
* Several devices on one machine (GPUs, or logical CPUs in tests):
  `tf.distribute.MirroredStrategy`; one replica per device.
* Several machines: `tf.distribute.MultiWorkerMirroredStrategy`, configured
  by the TF_CONFIG environment variable, which `--worker_hosts` and
  `--task_index` write. Each worker uses its own local devices.

As in tensor2tensor, `hparams.batch_size` is tokens per device, so
`tokens per update = batch_size x replicas x accumulate_steps`, and the
same global batch is reachable on any number of devices.

Only the chief (task "chief", or worker 0 when there is none) writes into
--output_dir; the other workers write their checkpoints into a temporary
directory that is deleted after each save (TensorFlow's documented
multi-worker pattern), and all of them restore the chief's checkpoint.
"""

import json
import os
import shutil
import signal
import tempfile
from typing import List, Optional, Tuple

import numpy as np
import tensorflow as tf

from t2tlite.errors import UserError

TF_CONFIG = "TF_CONFIG"
# Offset between replicas' dropout seed streams (a prime, so streams never coincide).
_REPLICA_SEED_STRIDE = 1_000_003


class DistributionError(UserError):
  """Inconsistent device or cluster settings; one line naming the flag or variable."""


def split_cpu(num_devices: int) -> None:
  """Splits the host CPU into `num_devices` logical devices (MirroredStrategy without GPUs).

  Must run before TensorFlow initialises its runtime (before any op runs).
  """
  cpu = tf.config.list_physical_devices("CPU")[0]
  current = tf.config.get_logical_device_configuration(cpu) or [None]
  if len(current) == num_devices:
    return
  try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)
  except RuntimeError:
    raise DistributionError(
        f"cannot split the CPU into {num_devices} logical devices: TensorFlow is already "
        f"initialised with {len(tf.config.list_logical_devices('CPU'))}") from None


def cluster_config(worker_hosts: str, task_index: int) -> dict:
  """The TF_CONFIG for `--worker_hosts=h0:port,h1:port --task_index=i`."""
  hosts = [h.strip() for h in worker_hosts.split(",") if h.strip()]
  for host in hosts:
    name, _, port = host.rpartition(":")
    if not name or not port.isdigit():
      raise DistributionError(f"--worker_hosts: {host!r} is not host:port")
  if len(set(hosts)) != len(hosts):
    raise DistributionError(f"--worker_hosts: {worker_hosts!r} names a worker twice")
  if not 0 <= task_index < len(hosts):
    raise DistributionError(f"--task_index={task_index} must be in [0, {len(hosts)}) for "
                            f"{len(hosts)} --worker_hosts")
  return {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": task_index}}


def _read_tf_config() -> Optional[dict]:
  text = os.environ.get(TF_CONFIG, "")
  if not text.strip():
    return None
  try:
    config = json.loads(text)
  except json.JSONDecodeError as e:
    raise DistributionError(f"{TF_CONFIG}: not valid JSON ({e})") from None
  task = config.get("task", {})
  jobs = config.get("cluster", {})
  if task.get("type") not in jobs or not 0 <= int(task.get("index", -1)) < len(
      jobs[task["type"]]):
    raise DistributionError(f"{TF_CONFIG}: task {task} is not in cluster {jobs}")
  return config


def make_strategy(num_gpus: int = -1, gpu_ids: str = "", cpu_devices: int = 1,
                  worker_hosts: str = "", task_index: int = 0) -> tf.distribute.Strategy:
  """The strategy the flags ask for; call it before anything runs a TensorFlow op.

  Args:
    num_gpus: GPUs to use, the first of those visible (-1: all; 0: CPU only).
    gpu_ids: comma list of GPU indices to use instead ("0,2").
    cpu_devices: without GPUs, logical CPU devices to mirror over (tests, benchmarks).
    worker_hosts, task_index: several machines (or processes); written to TF_CONFIG.
  """
  if worker_hosts:
    if os.environ.get(TF_CONFIG, "").strip():
      raise DistributionError(f"--worker_hosts and {TF_CONFIG} are both set; use one")
    os.environ[TF_CONFIG] = json.dumps(cluster_config(worker_hosts, task_index))
  _select_gpus(num_gpus, gpu_ids)
  devices = _local_devices(cpu_devices)
  if _read_tf_config():
    return tf.distribute.MultiWorkerMirroredStrategy()
  if len(devices) == 1:
    return tf.distribute.get_strategy()
  return tf.distribute.MirroredStrategy(devices)


def _select_gpus(num_gpus: int, gpu_ids: str) -> None:
  gpus = tf.config.list_physical_devices("GPU")
  if gpu_ids:
    try:
      ids = [int(i) for i in gpu_ids.split(",")]
    except ValueError:
      raise DistributionError(f"--gpu_ids={gpu_ids!r}: expected indices like 0,2") from None
    bad = [i for i in ids if not 0 <= i < len(gpus)]
    if bad:
      raise DistributionError(f"--gpu_ids={gpu_ids}: no GPU {bad[0]} ({len(gpus)} visible)")
    chosen = [gpus[i] for i in ids]
  elif num_gpus < 0:
    chosen = gpus
  elif num_gpus > len(gpus):
    raise DistributionError(f"--num_gpus={num_gpus}: only {len(gpus)} GPUs are visible")
  else:
    chosen = gpus[:num_gpus]
  if chosen != gpus:
    tf.config.set_visible_devices(chosen, "GPU")


def _local_devices(cpu_devices: int) -> List[str]:
  gpus = tf.config.get_visible_devices("GPU")
  if gpus:
    return [f"/gpu:{i}" for i in range(len(gpus))]
  if cpu_devices < 1:
    raise DistributionError(f"--cpu_devices={cpu_devices} must be >= 1")
  if cpu_devices > 1:
    split_cpu(cpu_devices)
  return [f"/cpu:{i}" for i in range(cpu_devices)]


def is_multi_worker(strategy) -> bool:
  return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def task_id(strategy) -> int:
  return strategy.cluster_resolver.task_id if is_multi_worker(strategy) else 0


def is_chief(strategy) -> bool:
  """True where checkpoints and summaries are written: the one process, or the chief."""
  if not is_multi_worker(strategy):
    return True
  resolver = strategy.cluster_resolver
  if resolver.task_type == "chief":
    return True
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def barrier(strategy) -> None:
  """Waits until every worker gets here (a one-number all-reduce); no-op on one machine.

  At the end of training, so no worker exits while the chief still evaluates
  (the others would see it stop sending heartbeats, or it them).
  """
  if is_multi_worker(strategy):
    tf.function(lambda: strategy.reduce(
        tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None))()


class StopAgreement:
  """Whether every worker stops before the next step: any worker's signal or verdict.

  Each worker learns of a signal (a scheduler's SIGTERM, Ctrl-C) at its own moment, and
  the chief alone reads dev's early stopping and the --train_seconds clock (the trainer
  passes False for them elsewhere); one worker stopping alone would leave the others
  waiting in the next step's all-reduce, and its step unsaved by them. So every worker
  calls this once after each step, in step with the others, and all act on one small
  all-reduce of what each saw: a one-hot of its signal's number, and its verdicts. Every
  worker then saves the same step, ends the same way and exits with the same status.
  """

  def __init__(self, strategy):
    self._sum = tf.function(lambda seen: strategy.reduce(
        tf.distribute.ReduceOp.SUM, strategy.run(lambda: seen), axis=None))

  def __call__(self, signum: Optional[int], *verdicts: bool) -> Tuple:
    """(the highest signal any worker received, or None; each verdict, true on any worker)."""
    seen = np.zeros(signal.NSIG + len(verdicts), np.float32)  # Signals, then verdicts.
    if signum:
      seen[signum] = 1.0
    seen[signal.NSIG:] = verdicts
    total = self._sum(tf.constant(seen)).numpy()
    received = np.flatnonzero(total[:signal.NSIG])
    return ((int(received[-1]) if received.size else None),
            *(bool(verdict) for verdict in total[signal.NSIG:]))


def checkpoint_write_dir(output_dir: str, strategy) -> str:
  """Where this process's CheckpointManager writes: output_dir, or a temp dir off the chief."""
  if is_chief(strategy):
    return output_dir
  return tempfile.mkdtemp(prefix=f"t2tlite_worker{task_id(strategy)}_")


def discard_write_dir(path: str, output_dir: str) -> None:
  """Deletes a non-chief worker's checkpoint directory after a save (never output_dir)."""
  if os.path.abspath(path) != os.path.abspath(output_dir):
    shutil.rmtree(path, ignore_errors=True)


def needs_cross_replica_sync(strategy) -> bool:
  """Whether gradients must be all-reduced (and so live outside one fused XLA cluster).

  MirroredStrategy's cross-device reductions on CPU cannot run inside an
  XLA-compiled function, so with it the compiled part is the per-replica
  forward/backward pass and the all-reduce and optimizer run around it.
  """
  return isinstance(strategy, (tf.distribute.MirroredStrategy,
                               tf.distribute.MultiWorkerMirroredStrategy))


def split_batch(strategy, batch: dict):
  """This worker's replicas' shares of a global batch: replica r gets the r-th block of rows.

  Every worker reads the same, identically seeded stream of global batches
  (a plain tf.data iterator, which checkpoints) and keeps its replicas' rows,
  so all replicas get one batch shape per step (they run one compiled program
  in lockstep), and the chief's saved input position is every worker's. Runs
  inside the step's tf.function; with one replica the batch passes unchanged.
  Without XLA the step is traced shape-relaxed (rows unknown from the second
  batch shape on), so the rows are then read at run time.
  """
  if not needs_cross_replica_sync(strategy):
    return batch
  replicas = strategy.num_replicas_in_sync
  rows = {}
  for key, value in batch.items():
    rows[key] = value.shape[0]
    if rows[key] is None:
      rows[key] = tf.shape(value)[0]
      tf.debugging.assert_equal(
          rows[key] % replicas, 0,
          message=f"batch {key} does not split into {replicas} equal replica shares")
    elif rows[key] % replicas:
      raise ValueError(f"batch {key} of shape {value.shape} does not split into "
                       f"{replicas} equal replica shares")

  def share(context):
    i = context.replica_id_in_sync_group
    return {k: v[i * (rows[k] // replicas):(i + 1) * (rows[k] // replicas)]
            for k, v in batch.items()}

  return strategy.experimental_distribute_values_from_function(share)


def decorrelate_dropout(model, strategy) -> None:
  """Gives every replica its own dropout random stream.

  Keras seed-generator states are mirrored, so every replica would draw the
  same dropout masks (tensor2tensor's towers draw independent ones). Replica r
  moves its stream by r x a prime; replica 0 keeps the single-device stream.
  Call again after restoring a checkpoint (which holds replica 0's state).
  """
  if not needs_cross_replica_sync(strategy):
    return
  local = len(strategy.extended.worker_devices)
  first = task_id(strategy) * local
  weight_ids = {id(w) for w in model.weights}
  for state in (v for v in model.variables if id(v) not in weight_ids):
    components = strategy.experimental_local_results(state.value)
    base = components[0].read_value()
    for i, component in enumerate(components):
      offset = tf.constant([_REPLICA_SEED_STRIDE * (first + i), 0], base.dtype)
      component.assign(base + offset)


def describe(strategy) -> str:
  """"MirroredStrategy: 2 replicas in sync, local devices ..." and the like, for the log."""
  if not needs_cross_replica_sync(strategy):
    gpus = tf.config.get_visible_devices("GPU")
    return f"one device ({'GPU:0' if gpus else 'CPU'}), default strategy"
  devices = strategy.extended.worker_devices
  name = type(strategy).__name__.lstrip("_")
  where = f"worker {task_id(strategy)}{' (chief)' if is_chief(strategy) else ''}, " if (
      is_multi_worker(strategy)) else ""
  return (f"{name}: {strategy.num_replicas_in_sync} replicas in sync, {where}"
          f"local devices {', '.join(devices)}")
