"""t2t-plot-curves: learning curves of one or more runs as a PNG, from their event files.

  t2t-plot-curves --output_dir=runs/multi30k_ende/train --png=docs/img/multi30k_ende.png
  t2t-plot-curves --output_dir=ende=runs/a/train,enfr=runs/b/train --png=curves.png

Panels: train loss, dev loss, dev BLEU (exact match for algorithmic problems, EVALB F1
for parsing)
against steps, as the trainer logged them for TensorBoard. --csv also writes
every scalar as step,value rows beside the PNG (one file per run, split and tag).
"""

import os

from absl import flags

from t2tlite import cli, files

FLAGS = flags.FLAGS
flags.DEFINE_list("output_dir", None, "Run directories (t2t-trainer --output_dir), each "
                  "optionally named: name=dir.")
flags.DEFINE_string("png", None, "The PNG to write.")
flags.DEFINE_string("title", "", "Figure title.")
flags.DEFINE_bool("csv", False, "Also write the scalars as CSV files beside the PNG.")
flags.DEFINE_bool("overwrite", False, "Replace an existing PNG.")


def main(argv):
  from t2tlite.training import curves
  specs = FLAGS.output_dir or []
  if not specs:
    raise cli.UsageError("--output_dir: give at least one run directory")
  png = cli.require("png")
  if os.path.exists(png) and not FLAGS.overwrite:
    raise cli.UsageError(f"--png={png} exists (pass --overwrite to replace it)")
  runs = {}
  for name, path in curves.parse_run_flags(specs).items():
    try:
      runs[name] = curves.read_run(path)
    except curves.CurvesError as e:
      raise cli.UsageError(f"--output_dir: {e}") from None
  drawn = curves.plot_runs(runs, png, FLAGS.title)
  if FLAGS.csv:
    stem = os.path.splitext(png)[0]
    for name, run in runs.items():
      for split, scalars in run.items():
        for tag, curve in scalars.items():
          with files.atomic_write(f"{stem}.{name}.{split}.{tag}.csv") as f:
            f.write("step,value\n" + "".join(f"{s},{v:.6g}\n" for s, v in curve))
  print(f"{png}: {', '.join(drawn)}")


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
