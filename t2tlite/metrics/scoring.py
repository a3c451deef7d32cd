"""Corpus scores of decoded text against references."""

from typing import Dict, Sequence

from t2tlite.metrics import bleu as bleu_lib
from t2tlite.metrics.bleu import check_lengths


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Fraction of lines equal to their reference, whitespace-normalised."""
  check_lengths(hypotheses, references)
  same = sum(" ".join(h.split()) == " ".join(r.split()) for h, r in zip(hypotheses, references))
  return same / max(len(references), 1)


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> bleu_lib.Score:
  """sacreBLEU corpus BLEU (13a tokenisation, cased), the detokenized standard."""
  return bleu_lib.sacrebleu_score(hypotheses, references)


def score(hypotheses, references, metrics: Sequence[str]) -> Dict[str, float]:
  """The named metrics ("exact_match", "bleu") as a dict."""
  out = {}
  if "exact_match" in metrics:
    out["exact_match"] = exact_match(hypotheses, references)
  if "bleu" in metrics:
    out["bleu"] = bleu(hypotheses, references).score
  return out

