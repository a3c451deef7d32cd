"""t2t-avg-all: average the last (or the best) N checkpoints of a run into one checkpoint.

  t2t-avg-all --output_dir=runs/base --n=5     # the paper's base models
  t2t-avg-all --output_dir=runs/big --n=20     # the paper's big models
  t2t-decoder --output_dir=runs/base --checkpoint_path=runs/base/averaged/ckpt-100000 ...
  t2t-avg-all --output_dir=runs/m30k --n=8 --best   # the 8 best by the run's --keep_best metric
  t2t-avg-all --output_dir=runs/m30k --steps=4200,4500,6643 --output_path=windows/bleu3/ckpt-6643

Writes <output_dir>/averaged/ckpt-<last step> (--best: averaged_best/ckpt-<newest
step averaged>, from the checkpoints `--keep_best --average_best_n` held in
best/; --steps: exactly the run's checkpoints of those steps, a window chosen
after the run, written to --output_path, outside the run's own directories),
and a .json naming the checkpoints averaged, and prints its path on stdout.
With fewer than N checkpoints it averages all of them, with a warning. An
existing average is kept unless --overwrite.
"""

from absl import flags

from t2tlite import cli, registry
from t2tlite.training import averaging

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "The training run whose checkpoints are averaged.")
flags.DEFINE_integer("n", 5, "Average the last N checkpoints (paper: 5 for base, 20 for big; "
                     "--best: the N best).")
flags.DEFINE_bool("best", False, "Average the N best checkpoints by the dev metric the run "
                  "kept in best/ (t2t-trainer --keep_best=METRIC --average_best_n=N), not the "
                  "last N.")
flags.DEFINE_list("steps", None, "Average exactly the run's checkpoints of these steps "
                  "(instead of --n), into --output_path.")
flags.DEFINE_string("output_path", None, "With --steps: the checkpoint prefix to write, e.g. "
                    "windows/best_bleu/ckpt-6643 (not in the run's directory or its averaged/, "
                    "averaged_best/, best/).")
flags.DEFINE_bool("overwrite", False, "Replace an existing averaged checkpoint.")
flags.DEFINE_string("problem", None, "If given, checked against the problem the run was "
                    "trained on (with --data_dir: also its vocabulary).")
flags.DEFINE_string("data_dir", None, "Data directory whose vocabulary is checked against the run.")
flags.DEFINE_string("t2t_usr_dir", None, "Directory of extra problems/hparams/models to import "
                    "(needed when the run's model is one of yours).")


def main(argv):
  output_dir = cli.require("output_dir")
  if FLAGS.n < 1:
    raise cli.UsageError(f"--n={FLAGS.n}: average at least 1 checkpoint")
  registry.import_usr_dir(FLAGS.t2t_usr_dir)
  if FLAGS.problem:  # The same data identity check as t2t-decoder's.
    from t2tlite.training import run_dir, run_identity
    registry.load_all()
    run_identity.check_data(output_dir, run_dir.load_run_info(output_dir),
                            run_dir.load_hparams(output_dir), registry.problem(FLAGS.problem),
                            FLAGS.data_dir, command="averaged")
  if FLAGS.steps is None:
    if FLAGS.output_path:
      raise cli.UsageError("--output_path: only with --steps (--n writes averaged/ckpt-N)")
    print(averaging.average_checkpoints(output_dir, FLAGS.n, overwrite=FLAGS.overwrite,
                                       best=FLAGS.best))
    return
  if FLAGS.best:
    raise cli.UsageError("--steps names the checkpoints itself: drop --best")
  if not FLAGS.output_path:
    raise cli.UsageError("--steps: name where the average goes with --output_path=DIR/ckpt-N")
  try:
    steps = [int(step) for step in FLAGS.steps]
  except ValueError:
    raise cli.UsageError(f"--steps={','.join(FLAGS.steps)}: a comma-separated list of "
                         "steps") from None
  if not steps:
    raise cli.UsageError("--steps: name at least one step")
  print(averaging.average_steps(output_dir, steps, FLAGS.output_path, overwrite=FLAGS.overwrite))


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
