"""Corpus scores of decoded text against references."""

from typing import Dict, Sequence

from t2tlite.data import linearize
from t2tlite.metrics import bleu as bleu_lib
from t2tlite.metrics import evalb
from t2tlite.metrics.bleu import check_lengths


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Fraction of lines equal to their reference, whitespace-normalised."""
  check_lengths(hypotheses, references)
  same = sum(" ".join(h.split()) == " ".join(r.split()) for h, r in zip(hypotheses, references))
  return same / max(len(references), 1)


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> bleu_lib.Score:
  """sacreBLEU corpus BLEU (13a tokenisation, cased), the detokenized standard."""
  return bleu_lib.sacrebleu_score(hypotheses, references)


def parse(hypotheses: Sequence[str], references: Sequence[str],
          params: evalb.EvalbParams = evalb.COLLINS) -> evalb.Result:
  """EVALB (COLLINS.prm) of decoded trees against gold trees, one per line.

  Decoded trees carry the placeholder tag XX; each takes its gold tags first
  (`linearize.tags_from_gold`: EVALB needs them to find punctuation). Scores
  on past MAX_ERROR, where EVALB would stop.
  """
  check_lengths(hypotheses, references)
  tagged = [linearize.tags_from_gold(h, r)[0] for h, r in zip(hypotheses, references)]
  return evalb.evaluate(references, tagged, params, stop_at_max_error=False)


def score(hypotheses, references, metrics: Sequence[str]) -> Dict[str, float]:
  """The named metrics ("exact_match", "bleu", "parse_f1") as a dict.

  "parse_f1" adds EVALB's precision, recall, complete match and the F1 of
  sentences of at most 40 words, all in percent.
  """
  out = {}
  if "exact_match" in metrics:
    out["exact_match"] = exact_match(hypotheses, references)
  if "bleu" in metrics:
    out["bleu"] = bleu(hypotheses, references).score
  if "parse_f1" in metrics:
    result = parse(hypotheses, references)
    out.update(parse_f1=result.all.f1, parse_precision=result.all.precision,
               parse_recall=result.all.recall, parse_complete_match=result.all.complete_match,
               parse_f1_len40=result.cutoff.f1, parse_errors=float(result.all.error),
               parse_skipped=float(result.all.skip))
  return out

