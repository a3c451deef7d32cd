"""One error family: every error a user can fix is a UserError, printed as one line, exit 2."""

import errno
import subprocess
import sys

import pytest

from t2tlite import cli, errors
from t2tlite.errors import UserError


def _user_error_classes():
  from t2tlite.data.parallel_text import ParallelTextError
  from t2tlite.data.subword import VocabularyError
  from t2tlite.data.trees import TreeError
  from t2tlite.hparams_record import HParamsError
  from t2tlite.metrics.evalb import EvalbError
  from t2tlite.overrides import OverrideError
  from t2tlite.problems.problem import ProblemError
  from t2tlite.registry import RegistryError
  from t2tlite.training.curves import CurvesError
  from t2tlite.training.distribution import DistributionError
  from t2tlite.training.run_dir import RunDirError
  return [HParamsError, OverrideError, RegistryError, RunDirError, ProblemError,
          ParallelTextError, VocabularyError, DistributionError, cli.UsageError, CurvesError,
          EvalbError, TreeError]


@pytest.mark.parametrize("cls", _user_error_classes(), ids=lambda c: c.__name__)
def test_every_user_fixable_error_is_a_user_error(cls):
  assert issubclass(cls, UserError)
  assert errors.one_line(cls("a: first line\nsecond")) == "a: first line"


def test_registry_error_stays_a_key_error_without_quotes():
  from t2tlite.registry import RegistryError
  error = RegistryError("unknown problem 'x'")
  assert isinstance(error, KeyError) and errors.one_line(error) == "unknown problem 'x'"


def test_os_errors_a_user_fixes_name_the_path_and_bugs_are_not_hidden():
  full = OSError(errno.ENOSPC, "No space left on device", "data/x.tfrecord")
  assert errors.one_line(full).startswith("data/x.tfrecord: No space left on device")
  denied = PermissionError(errno.EACCES, "Permission denied", "runs/r/hparams.json")
  assert errors.one_line(denied) == "runs/r/hparams.json: Permission denied"
  assert errors.one_line(OSError(errno.EIO, "Input/output error")) is None
  assert errors.one_line(KeyError("bug")) is None


def test_disk_full_in_a_command_is_one_line_and_exit_2(tmp_path):
  """ENOSPC injected at the one atomic writer (no small filesystem needed): one line, exit 2."""
  code = ("import errno, sys\n"
          "from t2tlite import files\n"
          "def full(paths):\n"
          "  raise OSError(errno.ENOSPC, 'No space left on device', paths[0] + '.incomplete')\n"
          "files.atomic_paths = full\n"
          "from t2tlite.bin import t2t_datagen\n"
          "sys.argv = ['t2t-datagen', '--problem=algorithmic_reverse', '--data_dir=' + sys.argv[1]]\n"
          "t2t_datagen.run()\n")
  proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                        text=True)
  assert proc.returncode == 2, proc.stderr
  error_lines = [line for line in proc.stderr.splitlines() if line.startswith("t2t-datagen:")]
  path = tmp_path / "algorithmic_reverse-train.tfrecord.incomplete"
  assert error_lines == [f"t2t-datagen: error: {path}: No space left on device (free some "
                         "space and rerun: the run resumes from its last checkpoint)"]
  assert "Traceback" not in proc.stderr
