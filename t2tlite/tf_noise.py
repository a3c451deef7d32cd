"""Keeps TensorFlow's C++ start-up noise out of the commands' output.

On a machine without a GPU, TensorFlow 2.21 prints, before any user output:

  WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
  I0000 ... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
  E0000 ... cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: ...

twice over, plus cpu_feature_guard lines. TF_CPP_MIN_LOG_LEVEL does not reach
them (they are logged by absl before TensorFlow reads it; measured: level 3
still prints the cudart_stub lines). So the commands import TensorFlow, and
probe its devices (which is what logs the cuInit line), with file descriptor
2 pointed at a temporary file, then pass every line that is not one of these
known messages on to stderr. Python's "triggered tf.function retracing"
warnings, logged once per function by TensorFlow and again through absl, are
dropped too: the trainer logs its own traces and compilations.

`--verbosity=1` (or higher) on any command leaves all of it in.
"""

import importlib.abc
import importlib.machinery
import logging
import os
import re
import sys
import tempfile

NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|cudart_stub\.cc|cuda_platform\.cc|failed call to cuInit|cuda_executor\.cc"
    r"|cpu_feature_guard\.cc|To enable the following instructions: .*rebuild TensorFlow"
    r"|rebuild TensorFlow with the appropriate compiler flags"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|computation_placer\.cc.*already registered"
    r"|oneDNN custom operations are on|TF-TRT Warning: Could not find TensorRT")

RETRACING = "triggered tf.function retracing"


def is_noise(line: str) -> bool:
  return bool(NOISE.search(line))


def verbosity_from_argv(argv) -> int:
  """absl's --verbosity / -v as written on the command line (0 if absent or unreadable)."""
  for i, arg in enumerate(argv[1:], 1):
    value = None
    for name in ("--verbosity", "-v"):
      if arg.startswith(name + "="):
        value = arg[len(name) + 1:]
      elif arg == name and i + 1 < len(argv):
        value = argv[i + 1]
    if value is not None:
      try:
        return int(value)
      except ValueError:
        return 0
  return 0


class _QuietLoader(importlib.abc.Loader):
  """Runs the real loader of `tensorflow` with stderr captured and filtered."""

  def __init__(self, loader):
    self.loader = loader

  def create_module(self, spec):
    return self.loader.create_module(spec)

  def exec_module(self, module):
    with FilteredStderr():
      self.loader.exec_module(module)
      try:  # Probing the devices is what logs the cuInit error: do it while filtered.
        module.config.list_physical_devices()
      except Exception:  # noqa: BLE001 - the command itself will meet any real problem.
        pass


class _QuietFinder(importlib.abc.MetaPathFinder):
  """Intercepts the first `import tensorflow` (wherever it happens) to load it quietly."""

  def find_spec(self, name, path=None, target=None):
    if name != "tensorflow":
      return None
    sys.meta_path.remove(self)  # Once: later imports find the loaded module.
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is not None and spec.loader is not None:
      spec.loader = _QuietLoader(spec.loader)
    return spec


class FilteredStderr:
  """Context: fd 2 goes to a temporary file; on exit its lines, less the noise, go to stderr."""

  def __enter__(self):
    sys.stderr.flush()
    self._saved = os.dup(2)
    self._file = tempfile.TemporaryFile()
    os.dup2(self._file.fileno(), 2)
    return self

  def __exit__(self, *exc):
    try:
      sys.stderr.flush()
    finally:
      os.dup2(self._saved, 2)
      os.close(self._saved)
    self._file.seek(0)
    kept = [line for line in self._file.read().decode("utf-8", "replace").splitlines(True)
            if not is_noise(line)]
    self._file.close()
    if kept:
      sys.stderr.write("".join(kept))
      sys.stderr.flush()
    return False


class _DropRetracing(logging.Filter):
  def filter(self, record):
    return RETRACING not in record.getMessage()


def install(argv=None) -> bool:
  """Quiets TensorFlow's start-up unless --verbosity >= 1; True if it did.

  Call before TensorFlow is imported (t2tlite.cli does, on import); once
  TensorFlow is loaded there is nothing left to hide at start-up.
  """
  argv = sys.argv if argv is None else argv
  if verbosity_from_argv(argv) >= 1:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
    return False
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # C++ INFO and WARNING lines off.
  logging.getLogger("tensorflow").addFilter(_DropRetracing())
  if "tensorflow" in sys.modules or any(isinstance(f, _QuietFinder) for f in sys.meta_path):
    return False
  sys.meta_path.insert(0, _QuietFinder())
  return True
