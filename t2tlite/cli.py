"""What the t2t-* commands share: common flags and one-line user errors.

Entry points in bin/ stay thin (flags -> registry -> library call). A mistake
the user can fix (unknown name, bad override, missing file, mismatched run
directory) ends the command with exit status 2 and a single line on stderr
naming the flag or file at fault, never a traceback.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # Before TensorFlow loads: no C++ info spam.

from absl import flags, logging  # noqa: E402

from t2tlite import errors, overrides, registry  # noqa: E402

FLAGS = flags.FLAGS


def user_errors() -> tuple:
  """Exception types that mean "the user can fix this": one line, exit status 2.

  Imported on demand: some of them live beside TensorFlow, which commands like
  t2t-bleu never need to load.
  """
  from t2tlite.data.parallel_text import ParallelTextError
  from t2tlite.data.subword import VocabularyError
  from t2tlite.hparams.hparams import HParamsError
  from t2tlite.problems.problem import ProblemError
  from t2tlite.training.distribution import DistributionError
  from t2tlite.training.run_dir import RunDirError
  from t2tlite.errors import UserError
  return (UserError, UsageError, registry.RegistryError, overrides.OverrideError, HParamsError,
          RunDirError, ProblemError, ParallelTextError, VocabularyError, FileNotFoundError,
          UnicodeDecodeError, DistributionError)


class UsageError(ValueError):
  """A missing or inconsistent flag."""


def define_registry_flags(with_hparams=True):
  """Flags naming registered things, as tensor2tensor spells them."""
  flags.DEFINE_string("problem", None, "Registered problem name (see --registry_help).")
  flags.DEFINE_string("model", "transformer", "Registered model name.")
  if with_hparams:
    flags.DEFINE_string("hparams_set", None, "Registered hparams set, e.g. transformer_base.")
    flags.DEFINE_string("hparams", "", 'Overrides, e.g. "num_heads=16,dropout=0.2".')
  flags.DEFINE_string("data_dir", None, "Directory of t2t-datagen output.")
  flags.DEFINE_string("t2t_usr_dir", None, "Directory of extra problems/hparams/models to import.")
  flags.DEFINE_bool("registry_help", False, "List registered problems, hparams sets and models.")


def require(flag_name: str) -> str:
  value = getattr(FLAGS, flag_name)
  if value in (None, ""):
    raise UsageError(f"--{flag_name} is required")
  return value


def read_flag_file(flag_name: str, path: str):
  """All lines of the text file a flag names (plain or gzip); errors name the flag and file."""
  from t2tlite.data.parallel_text import ParallelTextError, read_lines
  try:
    return list(read_lines(path))
  except ParallelTextError as e:  # No such file, or invalid UTF-8 (with the line number).
    raise UsageError(f"--{flag_name}={e}") from None
  except OSError as e:  # A directory, no permission.
    raise UsageError(f"--{flag_name}={path}: {e.strerror}") from None


def load_registry_or_exit():
  """Imports --t2t_usr_dir and fills the registries; prints them for --registry_help."""
  registry.import_usr_dir(FLAGS.t2t_usr_dir)
  registry.load_all()
  if FLAGS.registry_help:
    print(registry.help_string())
    sys.exit(0)


def run(main):
  """absl.app.run(main), turning user errors into one line and exit status 2."""
  from absl import app

  def guarded(argv):
    if len(argv) > 1:
      _exit(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.INFO)
    try:
      return main(argv)
    except Exception as e:  # noqa: BLE001 - narrowed just below.
      if isinstance(e, user_errors()):
        _exit(str(e).splitlines()[0] if str(e) else type(e).__name__)
      line = errors.one_line(e)  # Disk full, no permission: the path, one line.
      if line is None:
        raise
      _exit(line)

  app.run(guarded, flags_parser=_parse_flags)


def _parse_flags(argv):
  """absl's flag parsing, but an unknown or malformed flag is one line and exit status 2."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    _exit((str(e).splitlines() or ["bad flags"])[0])


def _exit(message: str):
  print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
  sys.exit(2)
