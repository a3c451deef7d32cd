r"""Chooses on dev which checkpoint average a run decodes test with: the last N, or the best N.

  python recipes/choose_average.py candidates OUT/train/averaged OUT/train/averaged_best \
      [--last_checkpoint=OUT/train] [--ensemble_with_last=OUT/train]
  # prints each directory's newest average, one per line, skipping an average of the
  # same steps as one already printed (an ensemble's: OUT/train.1/averaged,OUT/train.2/averaged),
  # then, with --last_checkpoint, the run's newest checkpoint itself (an ensemble's:
  # --last_checkpoint=OUT/train.1,OUT/train.2), then, with --ensemble_with_last, each average
  # and the run's newest checkpoint as one ensemble (AVERAGE,CHECKPOINT)
  python recipes/choose_average.py pick OUT/dev_choice.averaged.ckpt-8326.json \
      OUT/dev_choice.averaged_best.ckpt-5400.json --output_json=OUT/average_choice.json
  # prints two lines: the chosen checkpoint, then its decoding settings for t2t-decoder

The paper decodes the average of the last checkpoints (Section 6.1);
`--average_best_n` averages instead the checkpoints best by a dev metric, for
runs that over-fit before their time ends. Which of the two serves a run
better is not known before it trains, so both are candidates and dev decides,
as it decides beam size and alpha: each candidate's grid is run by
choose_decode.py on dev, and `pick` takes the one whose chosen point scores
highest on the problem's first metric. A tie goes to the candidate listed
first, so list the paper's (the last N) first. Test is never read.

Two averages of the same checkpoints (a run still at its best when it
stopped) are the same model: `candidates` prints it once, so its dev grid is
decoded once.

`--last_checkpoint` adds the run's newest checkpoint alone, listed last (an
average wins a tie): not the paper's, but the model a run whose rate decayed to
zero by its end (`learning_rate_decay_steps`) is best read from, where
averaging reaches back to weights trained at a higher rate (docs/results.md,
sixteenth round). It repeats the last-1 average, so with AVERAGE_LAST_N=1 it
is printed once.

`--ensemble_with_last` (one run) adds each average decoded together with the
run's newest checkpoint as one ensemble (t2t-decoder --output_dir=RUN,RUN
--checkpoint_path=AVERAGE,CHECKPOINT), listed after every single model, which
wins a tie at half the decoding cost: a snapshot ensemble, both members out of
the one run's training, so it keeps the run's budget (docs/results.md,
twenty-second round). An average of that checkpoint alone would be the model
twice, so it gets none.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from t2tlite import cli, errors, files
from t2tlite.training import averaging, checkpoint_manifest


class AverageChoiceError(errors.UserError):
  """A directory or a dev-choice json at fault; one line, exit 2."""


def newest_checkpoint(directory: str, kind: str = "") -> str:
  """The `ckpt-<step>` prefix in `directory` with the highest step; `kind` names it in the error."""
  checkpoints = checkpoint_manifest.list_checkpoints(directory)
  if not checkpoints:
    raise AverageChoiceError(f"{directory}: no {kind}ckpt-<step> checkpoint")
  return checkpoints[-1]


def newest_average(directory: str) -> str:
  """The newest average in an `averaged/` or `averaged_best/` directory."""
  return newest_checkpoint(directory, kind="averaged ")


def distinct_candidates(directories: Sequence[str], last_checkpoint: Optional[str] = None,
                        ensemble_with_last: Optional[str] = None) -> List[str]:
  """Each directory's newest average, in order, without repeating an average of the same steps.

  A directory may be several, comma-separated (an ensemble's members' averages of one kind):
  its candidate is their newest averages, comma-separated, as t2t-decoder's --checkpoint_path
  takes them; it repeats another when every member's average does. `last_checkpoint` (the
  training directories, comma-separated alike) adds their newest checkpoints, listed last; a
  checkpoint alone holds the steps [its step], as the average of that one checkpoint does.
  `ensemble_with_last` (one training directory) adds, after those, each distinct average
  with that run's newest checkpoint, comma-separated: one ensemble.
  """
  kinds = [(directory, True) for directory in directories]
  if last_checkpoint:
    kinds.append((last_checkpoint, False))
  chosen, seen, averages = [], [], []
  for directory, averaged in kinds:
    if averaged:
      prefixes = [newest_average(member) for member in directory.split(",")]
      steps = [averaging.averaged_steps(prefix) for prefix in prefixes]
    else:
      prefixes = [newest_checkpoint(member) for member in directory.split(",")]
      steps = [[checkpoint_manifest.step_of(prefix)] for prefix in prefixes]
    if steps not in seen:
      chosen.append(",".join(prefixes))
      seen.append(steps)
      if averaged:
        averages.append((chosen[-1], steps))
  if ensemble_with_last:
    chosen += _with_last_checkpoint(averages, ensemble_with_last)
  return chosen


def _with_last_checkpoint(averages: Sequence[Tuple[str, List[List[int]]]], run: str) -> List[str]:
  """Each (average, its steps) of one run, paired with the run's newest checkpoint."""
  if "," in run or any("," in average for average, _ in averages):
    raise AverageChoiceError(f"--ensemble_with_last={run}: pairs one run's averages with its "
                             "newest checkpoint; an ensemble of runs has no one newest")
  last = newest_checkpoint(run)
  alone = [[checkpoint_manifest.step_of(last)]]
  return [f"{average},{last}" for average, steps in averages if steps != alone]


def read_choice(path: str) -> Dict:
  """One choose_decode.py --output_json, finished (its grid chose a point)."""
  try:
    with open(path, encoding="utf-8") as f:
      report = json.load(f)
  except FileNotFoundError:
    raise AverageChoiceError(f"{path}: no such dev-choice json") from None
  except ValueError as e:
    raise AverageChoiceError(f"{path}: not JSON ({e})") from None
  if not isinstance(report, dict) or not report.get("chosen"):
    raise AverageChoiceError(f"{path}: its dev grid chose no point (unfinished?); rerun "
                             "choose_decode.py with the same flags to finish it")
  return report


def chosen_score(report: Dict) -> float:
  """The dev score of the point a choose_decode.py report chose."""
  point = next(p for p in report["points"] if p["name"] == report["chosen"])
  return point["metrics"][report["metric"]]


def pick(reports: Sequence[Dict]) -> Dict:
  """The report whose chosen point scores highest; among equals, the one listed first."""
  metrics = {r["metric"] for r in reports}
  if len(metrics) != 1:
    raise AverageChoiceError(f"the dev-choice jsons score different metrics {sorted(metrics)}; "
                             "compare runs of one problem")
  return max(reports, key=chosen_score)  # max keeps the first of equals.


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest="command", required=True)
  listing = commands.add_parser("candidates", help="Each directory's newest distinct average.")
  listing.add_argument("directories", nargs="+")
  listing.add_argument("--last_checkpoint", default=None,
                       help="Training directories (an ensemble's comma-separated) whose newest "
                            "checkpoint is a candidate too, listed after the averages.")
  listing.add_argument("--ensemble_with_last", default=None,
                       help="One training directory: each average decoded together with its "
                            "newest checkpoint as one ensemble is a candidate too, listed last.")
  choosing = commands.add_parser("pick", help="The candidate best on dev, and its settings.")
  choosing.add_argument("choices", nargs="+", help="choose_decode.py --output_json files.")
  choosing.add_argument("--output_json", default=None,
                        help="Records every candidate's dev score and the one chosen.")
  args = parser.parse_args(argv)

  if args.command == "candidates":
    for prefix in distinct_candidates(args.directories, args.last_checkpoint,
                                      args.ensemble_with_last):
      print(prefix)
    return 0
  reports = [read_choice(path) for path in args.choices]
  winner = pick(reports)
  summary = {"metric": winner["metric"],
             "candidates": [{"checkpoint": r["key"]["checkpoint"], "choice": path,
                             "decode_hparams": r["decode_hparams"], "dev": chosen_score(r)}
                            for path, r in zip(args.choices, reports)],
             "chosen": winner["key"]["checkpoint"], "decode_hparams": winner["decode_hparams"]}
  if args.output_json:
    with files.atomic_write(args.output_json) as f:
      json.dump(summary, f, indent=1)
      f.write("\n")
  for candidate in summary["candidates"]:
    print(f"{candidate['checkpoint']}: dev {summary['metric']} {candidate['dev']:.2f} "
          f"({candidate['decode_hparams']})", file=sys.stderr)
  print(f"chose {summary['chosen']}", file=sys.stderr)
  print(summary["chosen"])
  print(summary["decode_hparams"])
  return 0


def run() -> None:
  cli.run_script(main)


if __name__ == "__main__":
  run()
