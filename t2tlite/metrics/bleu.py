"""BLEU as it is reported today (sacreBLEU) and as the paper reported it, plus chrF.

The two BLEU figures of one translation are different numbers and must not be
compared with each other:

* sacreBLEU (Post, 2018) scores detokenized text with its own 13a tokenizer,
  cased, and prints a signature that pins every choice. It is the figure to
  compare with other systems today.
* The paper's BLEU (Vaswani et al., 2017, Table 2) came from tensor2tensor's
  `get_ende_bleu.sh`: Moses `tokenizer.perl -l de` on both sides, every
  intra-word hyphen split into `##AT##-##AT##` (as GNMT and ConvS2S had done, so
  the numbers stayed comparable), then `multi-bleu.perl`. A split compound is
  three tokens with easy n-gram matches, so this figure is not sacreBLEU's.
  `tokenized_bleu` reproduces that pipeline, with `sacremoses` (a port of
  tokenizer.perl) in place of the perl script.

Every function takes hypotheses and references as aligned lists of lines, one
reference per hypothesis, and returns a `Score` whose `str` is the line
t2t-bleu prints.
"""

import dataclasses
import functools
import re
from importlib import metadata
from typing import Dict, Sequence

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

# What get_ende_bleu.sh writes for a split hyphen; its presence means a line
# has already been through `compound_split`.
ATAT = "##AT##-##AT##"

# The perl one-liner `s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g`. The script's perl
# reads bytes, so its \s is ASCII whitespace only; re.ASCII keeps a non-ASCII
# space (e.g. U+00A0) counting as a word character here too.
_HYPHEN = re.compile(r"(\S)-(\S)", re.ASCII)


@dataclasses.dataclass(frozen=True)
class Score:
  """One corpus score and what is needed to reproduce it."""

  name: str  # "BLEU", "tokenized BLEU", "chrF2".
  score: float  # 0..100.
  tool: str  # Who computes it this way: "sacreBLEU" or "multi-bleu.perl".
  signature: str  # Every setting behind the score, sacreBLEU-style "key:value|...".
  details: Dict[str, object] = dataclasses.field(default_factory=dict)  # Precisions, lengths.

  def __str__(self):
    return f"{self.name} = {self.score:.2f} ({self.tool} {self.signature})"

  def as_dict(self) -> Dict[str, object]:
    return dataclasses.asdict(self)


def sacrebleu_score(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
  """sacreBLEU corpus BLEU of detokenized text: 13a tokenization, cased, exp smoothing."""
  check_lengths(hypotheses, references)
  metric = BLEU()
  result = metric.corpus_score(list(hypotheses), [list(references)])
  return Score("BLEU", result.score, "sacreBLEU", str(metric.get_signature()),
               _bleu_details(result))


def chrf(hypotheses: Sequence[str], references: Sequence[str], word_order: int = 0) -> Score:
  """sacreBLEU chrF (character 6-grams, beta=2); word_order=2 gives chrF++."""
  check_lengths(hypotheses, references)
  metric = CHRF(word_order=word_order)
  result = metric.corpus_score(list(hypotheses), [list(references)])
  return Score(result.name, result.score, "sacreBLEU", str(metric.get_signature()))


def compound_split(line: str) -> str:
  """Rewrites each intra-word hyphen `a-b` as `a ##AT##-##AT## b`, as get_ende_bleu.sh did.

  One left-to-right pass, exactly like the script's perl `s///g`: matches do not
  overlap, so a one-character part between two hyphens keeps its second hyphen
  (`a-b-c` -> `a ##AT##-##AT## b-c`, while `Mund-zu-Mund` splits fully).
  Reproducing the paper's number means keeping that quirk. Hyphens with a space
  (or line edge) on either side are untouched.

  A line that already contains `##AT##-##AT##` is returned unchanged: splitting
  it again would tear the marker itself apart (`# ##AT##-##AT## #`), so this
  function is idempotent and safe on files that were split before.
  """
  if ATAT in line:
    return line
  return _HYPHEN.sub(rf"\1 {ATAT} \2", line)


def moses_tokenize(line: str, lang: str) -> str:
  """`tokenizer.perl -l LANG` (no -a, XML escaping on, as in the script), via sacremoses."""
  return _moses_tokenizer(lang).tokenize(line, escape=True, return_str=True)


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str],
                   lang: str = "de") -> Score:
  """The paper's BLEU: Moses-tokenize, compound-split, then multi-bleu.perl.

  Both sides are detokenized text. A line that already contains
  `##AT##-##AT##` is taken to have been through this pipeline (e.g. a t2t-era
  `.atat` reference) and is scored as it is, neither tokenized nor split again.
  """
  check_lengths(hypotheses, references)
  prepare = functools.partial(_tokenize_and_split, lang=lang)
  result = multi_bleu([prepare(h) for h in hypotheses], [prepare(r) for r in references])
  signature = (f"nrefs:1|case:mixed|tok:moses-{lang}|split:compound-atat|smooth:none|"
               f"sacremoses:{metadata.version('sacremoses')}|version:{sacrebleu.__version__}")
  return dataclasses.replace(result, name="tokenized BLEU", signature=signature)


def lowercased_tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str],
                              lang: str = "de") -> Score:
  """BLEU as the Multi30k literature reports it: lowercased, Moses-tokenized, multi-bleu.perl.

  No compound splitting (that was the WMT14 en-de convention only).
  """
  check_lengths(hypotheses, references)
  prepare = lambda line: moses_tokenize(line, lang).lower()
  result = multi_bleu([prepare(h) for h in hypotheses], [prepare(r) for r in references])
  signature = (f"nrefs:1|case:lc|tok:moses-{lang}|smooth:none|"
               f"sacremoses:{metadata.version('sacremoses')}|version:{sacrebleu.__version__}")
  return dataclasses.replace(result, name="lowercased tokenized BLEU", signature=signature)


def multi_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
  """multi-bleu.perl on already tokenized text: whitespace tokens, cased, no smoothing.

  sacreBLEU with tokenize="none" and smooth_method="none" is the same
  computation: n-gram counts clipped by the reference, closest reference
  length for the brevity penalty, and a score of 0 when any n-gram order has
  no match (multi-bleu.perl's log floor). Its default exp smoothing would
  differ exactly there. force=True only silences the "looks tokenized" warning.
  """
  check_lengths(hypotheses, references)
  metric = BLEU(tokenize="none", smooth_method="none", force=True)
  result = metric.corpus_score(list(hypotheses), [list(references)])
  return Score("BLEU", result.score, "multi-bleu.perl", str(metric.get_signature()),
               _bleu_details(result))


def _tokenize_and_split(line: str, lang: str) -> str:
  if ATAT in line:
    return line
  return compound_split(moses_tokenize(line, lang))


@functools.lru_cache(maxsize=None)
def _moses_tokenizer(lang: str):
  # Imported here so that sacreBLEU scoring works without sacremoses installed.
  from sacremoses import MosesTokenizer
  return MosesTokenizer(lang=lang)


def _bleu_details(result) -> Dict[str, object]:
  return {"precisions": [round(p, 4) for p in result.precisions], "bp": round(result.bp, 4),
          "ratio": round(result.sys_len / max(result.ref_len, 1), 4),
          "hyp_len": result.sys_len, "ref_len": result.ref_len}


def check_lengths(hypotheses, references):
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
