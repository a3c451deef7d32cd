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
known messages on to stderr. Two Python log messages are dropped too:
TensorFlow's "triggered tf.function retracing" warnings, logged once per function
by TensorFlow and again through absl (the trainer logs its own traces and
compilations), and the checkpoint writer's "Sharding callback duration: N
microseconds", an absl INFO line at every checkpoint saved (the trainer logs
each save itself).

`--verbosity=1` (or higher) on any command leaves all of it in.

The first import of TensorFlow or Keras (Keras loads TensorFlow, its default
backend) is the one intercepted, and it leaves out the optional packages the two
would load for features no command calls (t2tlite.optional_imports), verbose or not.
"""

import importlib.abc
import importlib.machinery
import logging
import os
import re
import sys
import tempfile

from t2tlite import optional_imports

NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|cudart_stub\.cc|cuda_platform\.cc|failed call to cuInit|cuda_executor\.cc"
    r"|cpu_feature_guard\.cc|To enable the following instructions: .*rebuild TensorFlow"
    r"|rebuild TensorFlow with the appropriate compiler flags"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|computation_placer\.cc.*already registered"
    r"|oneDNN custom operations are on|TF-TRT Warning: Could not find TensorRT")

RETRACING = "triggered tf.function retracing"
SHARDING_CALLBACK = "Sharding callback duration"  # tensorflow/python/checkpoint/functional_saver.py
PYTHON_NOISE = (RETRACING, SHARDING_CALLBACK)

FIRST_IMPORTS = ("tensorflow", "keras")  # Either loads TensorFlow (Keras's default backend).


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


class _LeanLoader(importlib.abc.Loader):
  """Runs the real loader of TensorFlow (or Keras) without the optional packages; quiet if asked."""

  def __init__(self, loader, quiet: bool):
    self.loader = loader
    self.quiet = quiet

  def create_module(self, spec):
    return self.loader.create_module(spec)

  def exec_module(self, module):
    with optional_imports.skipped():
      if not self.quiet:
        self.loader.exec_module(module)
        return
      with FilteredStderr():
        self.loader.exec_module(module)
        try:  # Probing the devices is what logs the cuInit error: do it while filtered.
          if "tensorflow" in sys.modules:  # Keras on JAX may not load it.
            sys.modules["tensorflow"].config.list_physical_devices()
        except Exception:  # noqa: BLE001 - the command itself will meet any real problem.
          pass


class _FirstImportFinder(importlib.abc.MetaPathFinder):
  """Intercepts the first import of TensorFlow or Keras (which loads TensorFlow, and Keras's
  own optional packages before it): lean, and quiet if asked."""

  def __init__(self, quiet: bool):
    self.quiet = quiet

  def find_spec(self, name, path=None, target=None):
    if name not in FIRST_IMPORTS:
      return None
    sys.meta_path.remove(self)  # Once: later imports find the loaded module.
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is not None and spec.loader is not None:
      spec.loader = _LeanLoader(spec.loader, self.quiet)
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


class _DropPythonNoise(logging.Filter):
  def filter(self, record):
    message = record.getMessage()
    return not any(noise in message for noise in PYTHON_NOISE)


def install(argv=None) -> bool:
  """Quiets TensorFlow's start-up unless --verbosity >= 1; True if it did.

  Call before TensorFlow is imported (t2tlite.cli does, on import); once
  TensorFlow is loaded there is nothing left to hide at start-up. Quiet or
  not, the first import leaves out the optional packages (module docstring).
  """
  argv = sys.argv if argv is None else argv
  quiet = verbosity_from_argv(argv) < 1
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2" if quiet else "0")  # 2: C++ INFO, WARNING off
  if quiet:  # A logger's filters see the records logged to it: TensorFlow's and absl's.
    from absl import logging as absl_logging  # Its own logger class: made by absl, not here.
    for logger in (logging.getLogger("tensorflow"), absl_logging.get_absl_logger()):
      logger.addFilter(_DropPythonNoise())
  if (any(name in sys.modules for name in FIRST_IMPORTS)
      or any(isinstance(f, _FirstImportFinder) for f in sys.meta_path)):
    return False
  sys.meta_path.insert(0, _FirstImportFinder(quiet))
  return quiet
