r"""t2t-parse-eval: EVALB's labeled bracketing scores of parse trees against gold trees.

  t2t-parse-eval --gold=data/ptb_sample-test.trees --test=runs/parse/test.trees
  t2t-parse-eval --gold=sec23.gold --test=sec23.parsed --evalb_params=COLLINS.prm \
      --nosentences --output_json=scores.json

One tree a line in each file, aligned line by line (plain or gzipped). The
output is EVALB's (`evalb -p COLLINS.prm gold test`, see
t2tlite/metrics/evalb.py): the per-sentence table, then the summary for all
sentences and for length <= CUTOFF_LEN. Without --evalb_params the
parameters are COLLINS.prm's. As EVALB does, the run stops with an error
(exit status 2) at the error after MAX_ERROR + 1 (length or word mismatch)
unless --ignore_max_error.

Trees from t2t-decoder carry the placeholder tag XX (the model predicts no
POS tags); those take their gold tags first (--placeholder_tag, see
`linearize.tags_from_gold`), without which EVALB would count every sentence
with punctuation as a length error. Trees with real tags are left alone.
"""

import json
import sys

from absl import flags, logging

from t2tlite import cli, files
from t2tlite.data import linearize
from t2tlite.metrics import evalb

FLAGS = flags.FLAGS
flags.DEFINE_string("gold", None, "Gold trees, one a line (EVALB's gold file).")
flags.DEFINE_string("test", None, "Parsed trees, one a line, aligned with --gold.")
flags.DEFINE_string("evalb_params", None, "An EVALB .prm file (default: COLLINS.prm's values).")
flags.DEFINE_bool("sentences", True, "Print EVALB's per-sentence table before the summary.")
flags.DEFINE_string("placeholder_tag", linearize.POS_TOKEN,
                    "Test words with this POS tag take the gold tag before scoring "
                    "('' to score the tags as written).")
flags.DEFINE_bool("ignore_max_error", False, "Score everything even past MAX_ERROR errors.")
flags.DEFINE_string("output_json", None, "Also write both summaries here.")


def main(argv):
  gold = cli.read_flag_file("gold", cli.require("gold"))
  test = cli.read_flag_file("test", cli.require("test"))
  if len(gold) != len(test):
    raise cli.UsageError(f"--gold={FLAGS.gold} has {len(gold)} lines but --test={FLAGS.test} "
                         f"has {len(test)}")
  try:
    params = evalb.read_params(FLAGS.evalb_params) if FLAGS.evalb_params else evalb.COLLINS
  except evalb.EvalbError as e:
    raise cli.UsageError(f"--evalb_params={e}") from None
  filled = 0
  if FLAGS.placeholder_tag:
    tagged = [linearize.tags_from_gold(t, g, FLAGS.placeholder_tag) for t, g in zip(test, gold)]
    test = [line for line, _ in tagged]
    filled = sum(n for _, n in tagged)
  try:
    result = evalb.evaluate(gold, test, params, stop_at_max_error=not FLAGS.ignore_max_error)
  except evalb.EvalbFatal as e:
    raise cli.UsageError(f"--test={FLAGS.test}: {e} (--ignore_max_error scores anyway)") from None
  sys.stdout.write(result.report(per_sentence=FLAGS.sentences))
  if filled:
    logging.info("%d words tagged %s took their gold tags: tagging accuracy measures nothing",
                 filled, FLAGS.placeholder_tag)
  if FLAGS.output_json:
    with files.atomic_write(FLAGS.output_json) as f:
      json.dump({"gold": FLAGS.gold, "test": FLAGS.test,
                 "evalb_params": FLAGS.evalb_params or "COLLINS.prm (built in)",
                 "placeholder_tags_filled": filled, "all": result.all.as_dict(),
                 f"len<={params.cutoff_len}": result.cutoff.as_dict()}, f, indent=1)
      f.write("\n")


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
