"""Shared fixtures: quiet TensorFlow, logical CPUs, ../shared data, the one trained tiny run.

Helpers that are not fixtures live in tests/helpers.py.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _share_the_cores_between_test_processes():
  """Under `pytest -n N`, each process's TensorFlow (and the commands it starts) gets its share.

  TensorFlow sizes both of its thread pools to every core; N test processes, each also
  running t2t-* commands, then ask for N or more times the cores, and their threads wait on
  one another. Set before TensorFlow starts (it reads these once); the environment passes
  them on to the commands the tests start. An explicit setting wins.
  """
  workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
  if workers > 1:
    share = str(max(1, len(os.sched_getaffinity(0)) // workers))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", share)
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", share)


_share_the_cores_between_test_processes()

import pytest  # noqa: E402

from tests.helpers import SHARED, tiny_trainer  # noqa: E402

LOGICAL_CPUS = 2  # MirroredStrategy tests (test_distribute.py) mirror over 2 logical CPUs.


def _split_cpu():
  """Splits the CPU into logical devices, which TensorFlow allows only before it starts.

  Done here, before any test runs an op; tests that use no strategy run on
  /cpu:0 as before.
  """
  import tensorflow as tf
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * LOGICAL_CPUS)


_split_cpu()

# The longest test files, longest first (seconds per file in a 2-process run, 2026-12-01).
# `-n 2 --dist loadfile` hands whole files to whichever process is free, in collection order;
# xdist would order files by their number of tests, which let a long file start last and
# run alone at the end. Longest first keeps both processes busy to the end.
LONGEST_FILES = ["test_distribute.py", "test_faults.py", "test_decoder.py", "test_cli.py",
                 "test_parsing.py", "test_export.py", "test_recipes.py", "test_tree_constraint.py",
                 "test_jax_search.py", "test_translate.py", "test_jax_training.py",
                 "test_training.py", "test_ensemble.py", "test_model.py", "test_backends.py"]


def pytest_configure(config):
  if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order set below.
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
  """Runs the LONGEST_FILES first, longest first; the rest after them in their own order."""
  rank = {name: i for i, name in enumerate(LONGEST_FILES)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture
def shared_dir():
  if not os.path.isdir(SHARED):
    pytest.skip("../shared not found (beside the clone, or $T2TLITE_SHARED)")
  return SHARED


TINY_RUN_STEPS = 200  # Long enough for peaked logits (decoding tests), short enough for CI.
TINY_RUN_EVERY = 20  # Checkpoint interval: 10 checkpoints to average, resume from, compare with.


class TinyRun:
  """The session's trained tiny run (tests/helpers.py: tiny_trainer), trained once.

  trainer: the Trainer after train() (its model holds the final weights; don't train it
  further), metrics: its last evaluation, output_dir: the run directory (copy it before
  changing it), steps: the steps of its trained checkpoints (ckpt-0, the restart point
  saved before the first update, is left out: averaging never uses it).
  """

  def __init__(self, output_dir):
    self.output_dir = str(output_dir)
    self.trainer = tiny_trainer(output_dir, TINY_RUN_STEPS, **self.options())
    self.metrics = self.trainer.train()
    from t2tlite.training import checkpoint_manifest
    steps = [checkpoint_manifest.step_of(p) for p in self.trainer.manager.checkpoints]
    self.steps = [s for s in steps if s > 0]

  @staticmethod
  def options():
    """Its TrainOptions: evaluation (dev decoding included) twice, average of the last 3."""
    return dict(eval_every=TINY_RUN_STEPS // 2, save_checkpoints_steps=TINY_RUN_EVERY,
                keep_checkpoint_max=TINY_RUN_STEPS // TINY_RUN_EVERY + 2, average_last_n=3,
                log_every=TINY_RUN_EVERY)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
  """One tiny model trained for the whole session (training, averaging and decoding tests)."""
  return TinyRun(tmp_path_factory.mktemp("tiny_run") / "run")
