"""Shared fixtures: quiet TensorFlow, small models, paths to ../shared data."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _find_shared():
  """The project's ../shared (paper spec, real data): beside the clone, $T2TLITE_SHARED, or /work/shared."""
  candidates = [os.path.join(os.path.dirname(REPO), "shared"), os.environ.get("T2TLITE_SHARED", ""),
                "/work/shared"]
  return next((c for c in candidates if c and os.path.isdir(c)), candidates[0])


SHARED = _find_shared()
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


def tiny_hparams(**changes):
  """A 2+2-layer d_model=32 model: fast enough to build dozens of times in tests."""
  from t2tlite import registry
  hp = registry.hparams("transformer_tiny").replace(
      d_model=32, d_ff=64, num_heads=4, input_vocab_size=20, target_vocab_size=20)
  return hp.replace(**changes)


@pytest.fixture
def shared_dir():
  if not os.path.isdir(SHARED):
    pytest.skip("../shared not found (beside the clone, $T2TLITE_SHARED or /work/shared)")
  return SHARED
