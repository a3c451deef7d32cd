"""What the t2t-* commands share: common flags and one-line user errors.

Entry points in bin/ stay thin (flags -> registry -> library call). A mistake
the user can fix (unknown name, bad override, missing file, mismatched run
directory) ends the command with exit status 2 and a single line on stderr
naming the flag or file at fault, never a traceback.
"""

import gc
import os
import signal
import sys

from t2tlite import tf_noise

tf_noise.install()  # Before TensorFlow loads: its C++ start-up lines stay out (--verbosity=1 keeps them).

from absl import flags, logging  # noqa: E402

from t2tlite import describe, errors, registry  # noqa: E402
from t2tlite.errors import UserError  # noqa: E402
from t2tlite.training.stop_signals import StopRequested  # noqa: E402

FLAGS = flags.FLAGS


class UsageError(UserError):
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
  flags.DEFINE_bool("registry_help", False, "List registered problems, hparams sets and models, "
                    "one line each, with tensor2tensor's names for them.")
  if with_hparams:
    flags.DEFINE_bool("hparams_help", False, "List every --hparams key with its type, default "
                      "and meaning.")


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


def handle_registry_flags():
  """Imports --t2t_usr_dir; prints the registries for --registry_help (or the hparams for
  --hparams_help) and exits. Each registry fills when first asked (registry.problem loads the
  problems, and TensorFlow with them), so a mistake in the flags checked before is reported
  in a fraction of a second."""
  registry.import_usr_dir(FLAGS.t2t_usr_dir)
  if FLAGS.registry_help:
    print(describe.registry_help())
    sys.exit(0)
  if "hparams_help" in FLAGS and FLAGS.hparams_help:
    print(describe.hparams_help(type(registry.hparams("transformer_base"))))
    sys.exit(0)


def run(main):
  """absl.app.run(main), turning user errors into one line and exit status 2."""
  from absl import app

  def guarded(argv):
    if len(argv) > 1:
      _exit(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS["verbosity"].present:  # INFO by default; --verbosity=N still wins.
      logging.set_verbosity(logging.INFO)
    try:
      status = main(argv)
      sys.stdout.flush()  # A closed pipe shows here, not at exit where it cannot be caught.
      return status
    except StopRequested as e:  # Ctrl-C or SIGTERM, the work saved: one line, not an error.
      _leave(str(e), e.exit_status)
    except KeyboardInterrupt:  # Ctrl-C elsewhere: outputs are written whole or not at all.
      _leave("interrupted", 128 + signal.SIGINT)
    except BrokenPipeError:  # `t2t-trainer --hparams_help | head`: the reader has had enough.
      # Python's documented recipe: no traceback, and stdout pointed at devnull so the
      # interpreter's own flush at exit does not fail again.
      os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
      sys.exit(1)
    except Exception as e:  # noqa: BLE001 - narrowed just below.
      line = errors.one_line(e)
      if line is None:
        raise
      _exit(line)
    finally:
      collect_now_not_at_exit()

  _help_shows_command_flags(sys.modules[main.__module__])
  app.run(guarded, flags_parser=_parse_flags)


def _parse_flags(argv):
  """absl's flag parsing, but an unknown or malformed flag is one line and exit status 2."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    _exit((str(e).splitlines() or ["bad flags"])[0])


def _help_shows_command_flags(module):
  """Makes `--help` list the command's own flags (with help text), not just a usage line.

  absl's --help prints the docstring of `__main__` and the key flags of the
  module named `sys.argv[0]`. Run as a console script, `__main__` is pip's
  wrapper (no docstring, no flags), and the shared flags defined here belong to
  this module either way; so both become key flags of sys.argv[0], and the
  command's docstring becomes `__main__`'s.
  """
  main_module = sys.modules["__main__"]
  if not main_module.__doc__:
    main_module.__doc__ = module.__doc__
  own = FLAGS.get_key_flags_for_module(module.__name__)
  shared = FLAGS.get_key_flags_for_module(__name__)
  verbosity = [FLAGS["verbosity"]] if "verbosity" in FLAGS else []
  for flag in own + shared + verbosity:
    FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def run_script(main) -> None:
  """sys.exit(main()) for a plain argparse script (recipes/): a UserError is one line, exit 2."""
  try:
    sys.exit(main())
  except errors.UserError as e:
    _exit(errors.one_line(e))
  finally:
    collect_now_not_at_exit()


def collect_now_not_at_exit() -> None:
  """Collects the command's garbage now and freezes what is left alive out of the exit's
  collections: the interpreter's exit otherwise runs the cycle collector over every object
  TensorFlow and Keras made, several times over (1.0-1.4 s of each command that loads them,
  against 0.1 s frozen). Called once the command's work is done: its files are closed (the
  objects still alive are reachable and torn down as modules are, as before; only cycles
  among them are left to the process's end)."""
  gc.collect()
  gc.freeze()


def _exit(message: str):
  _leave(f"error: {message}", 2)


def _leave(text: str, status: int):
  """Ends the command with one line on stderr, "<command>: <text>", and exit `status`."""
  print(f"{os.path.basename(sys.argv[0])}: {text}", file=sys.stderr)
  sys.exit(status)
