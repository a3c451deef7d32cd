r"""t2t-bleu: score a translation against its reference, as reported today and as in the paper.

  t2t-bleu --translation=decoded.de --reference=newstest2014.de
  t2t-bleu --translation=decoded.en --reference=newstest2014.en --language=en \
      --nochrf --output_json=scores.json
  t2t-bleu --translation=test_2016.de --reference=test_2016_flickr.de --lowercased_bleu

Both files are detokenized text, one sentence a line, aligned line by line
(plain or gzipped). Prints one line per score, e.g.

  BLEU = 26.12 (sacreBLEU nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0)
  tokenized BLEU = 26.85 (multi-bleu.perl nrefs:1|case:mixed|tok:moses-de|...)
  chrF2 = 56.40 (sacreBLEU nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0)

The first is the figure to compare with other systems; the second is computed
the way the paper's Table 2 was (see t2tlite/metrics/bleu.py) and is only
comparable with papers that did the same.
"""

import json
import os

from absl import flags

from t2tlite import cli, files
from t2tlite.data.parallel_text import ParallelTextError
from t2tlite.metrics import bleu

FLAGS = flags.FLAGS
flags.DEFINE_string("translation", None, "System output, detokenized, one sentence a line.")
flags.DEFINE_string("reference", None, "Reference translation, aligned with --translation.")
flags.DEFINE_bool("tokenized_bleu", True, "Also report the paper's BLEU: Moses-tokenized, "
                  "compound-split (##AT##-##AT##), multi-bleu.perl.")
flags.DEFINE_bool("lowercased_bleu", False, "Also report BLEU on lowercased Moses-tokenized "
                  "text without compound splitting (how Multi30k results are published).")
flags.DEFINE_bool("chrf", True, "Also report sacreBLEU's chrF.")
flags.DEFINE_string("language", "de", "Target language, for the Moses tokenizer of "
                    "--tokenized_bleu.")
flags.DEFINE_string("output_json", None, "Also write the scores and their signatures here.")
flags.DEFINE_bool("overwrite", False, "Replace an existing --output_json.")


def main(argv):
  _check_language(FLAGS.language)
  if FLAGS.output_json and os.path.exists(FLAGS.output_json) and not FLAGS.overwrite:
    raise cli.UsageError(f"--output_json={FLAGS.output_json} exists; pass --overwrite to "
                         "replace it")
  hypotheses = _read("translation")
  references = _read("reference")
  if len(hypotheses) != len(references):
    raise ParallelTextError(f"--translation {FLAGS.translation} has {len(hypotheses)} lines but "
                            f"--reference {FLAGS.reference} has {len(references)}")
  if not references:
    raise cli.UsageError(f"--reference {FLAGS.reference} is empty")

  scores = {"bleu": bleu.sacrebleu_score(hypotheses, references)}
  if FLAGS.tokenized_bleu:
    scores["tokenized_bleu"] = bleu.tokenized_bleu(hypotheses, references, FLAGS.language)
  if FLAGS.lowercased_bleu:
    scores["lowercased_tokenized_bleu"] = bleu.lowercased_tokenized_bleu(
        hypotheses, references, FLAGS.language)
  if FLAGS.chrf:
    scores["chrf"] = bleu.chrf(hypotheses, references)
  for score in scores.values():
    print(score)

  if FLAGS.output_json:
    report = {"translation": FLAGS.translation, "reference": FLAGS.reference,
              "lines": len(references), **{k: s.as_dict() for k, s in scores.items()}}
    with files.atomic_write(FLAGS.output_json) as f:
      json.dump(report, f, indent=1)
      f.write("\n")


def _check_language(language: str) -> None:
  """--language must be one the Moses tokenizer knows (else it silently tokenizes as English)."""
  from sacremoses.corpus import NonbreakingPrefixes
  codes = sorted(code for code in NonbreakingPrefixes().available_langs if len(code) <= 3)
  if language not in codes:
    raise cli.UsageError(f"--language={language}: not a Moses tokenizer language; use one of "
                         f"{', '.join(codes)}")


def _read(flag_name: str):
  """All lines of the file named by --flag_name; errors name the flag as well as the file."""
  return cli.read_flag_file(flag_name, cli.require(flag_name))


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
