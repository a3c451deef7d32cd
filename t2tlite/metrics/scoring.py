"""Corpus scores of decoded text against references."""

from typing import Dict, Sequence

import sacrebleu


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Fraction of lines equal to their reference, whitespace-normalised."""
  _check_lengths(hypotheses, references)
  same = sum(" ".join(h.split()) == " ".join(r.split()) for h, r in zip(hypotheses, references))
  return same / max(len(references), 1)


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> sacrebleu.metrics.bleu.BLEUScore:
  """sacreBLEU corpus BLEU (13a tokenisation, cased), the detokenized standard."""
  _check_lengths(hypotheses, references)
  return sacrebleu.corpus_bleu(list(hypotheses), [list(references)])


def score(hypotheses, references, metrics: Sequence[str]) -> Dict[str, float]:
  """The named metrics ("exact_match", "bleu") as a dict."""
  out = {}
  if "exact_match" in metrics:
    out["exact_match"] = exact_match(hypotheses, references)
  if "bleu" in metrics:
    out["bleu"] = bleu(hypotheses, references).score
  return out


def _check_lengths(hypotheses, references):
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
