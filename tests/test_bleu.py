"""t2t-bleu against independent truth: the sacrebleu command, perl, and multi-bleu by hand."""

import collections
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from t2tlite.metrics import bleu, scoring
from tests.helpers import one_line_error, run

NEWSTEST2014_DE = os.path.join("data", "wmt", "newstest2014.en-de.de")
PERL_SPLIT = r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g"  # get_ende_bleu.sh, verbatim.

SPLITS = [
    ("Vize-Präsident", "Vize ##AT##-##AT## Präsident"),
    ("der US-Vize-Präsident", "der US ##AT##-##AT## Vize ##AT##-##AT## Präsident"),
    # perl's /g resumes after the consumed "b": a one-character part keeps its second hyphen.
    ("a-b-c", "a ##AT##-##AT## b-c"),
    ("Mund-zu-Mund", "Mund ##AT##-##AT## zu ##AT##-##AT## Mund"),
    ("2013-2014", "2013 ##AT##-##AT## 2014"),
    ("a--b", "a ##AT##-##AT## -b"),
    ("-a b- - c", "-a b- - c"),  # Leading, trailing and lone hyphens: no \S on both sides.
    ("-", "-"),
    ("", ""),
    ("E-Mail,", "E ##AT##-##AT## Mail,"),
    ("a-\u00a0b", "a ##AT##-##AT## \u00a0b"),  # The script's byte-mode perl: U+00A0 is not \s.
]
ALREADY_SPLIT = ["Vize ##AT##-##AT## Präsident", "a ##AT##-##AT## b-c"]


@pytest.mark.parametrize("line,expected", SPLITS)
def test_compound_split(line, expected):
  assert bleu.compound_split(line) == expected
  assert bleu.compound_split(expected) == expected  # Idempotent.


@pytest.mark.parametrize("line", ALREADY_SPLIT)
def test_compound_split_leaves_split_text_alone(line):
  assert bleu.compound_split(line) == line
  assert bleu.tokenized_bleu([line], [line]).details["hyp_len"] == len(line.split())


def test_compound_split_equals_the_perl_one_liner(shared_dir):
  if not shutil.which("perl"):
    pytest.skip("no perl")
  lines = [line for line, _ in SPLITS]
  path = os.path.join(shared_dir, NEWSTEST2014_DE)
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      lines += [bleu.moses_tokenize(line, "de") for line in f.read().splitlines()[:500]]
  assert sum(bleu.ATAT in bleu.compound_split(line) for line in lines) > 20
  perl = subprocess.run(["perl", "-ple", PERL_SPLIT], input="\n".join(lines) + "\n",
                        capture_output=True, text=True, encoding="utf-8", check=True)
  assert perl.stdout.splitlines() == [bleu.compound_split(line) for line in lines]


def brute_force_multi_bleu(hypotheses, references):
  """multi-bleu.perl written out: clipped n-gram precisions, brevity penalty, no smoothing."""
  correct, total = [0] * 4, [0] * 4
  hyp_len = ref_len = 0
  for hyp, ref in zip(hypotheses, references):
    hyp, ref = hyp.split(), ref.split()
    hyp_len, ref_len = hyp_len + len(hyp), ref_len + len(ref)
    for n in range(1, 5):
      hyp_ngrams = [tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1)]
      ref_counts = collections.Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
      for ngram, count in collections.Counter(hyp_ngrams).items():
        correct[n - 1] += min(count, ref_counts[ngram])
      total[n - 1] += len(hyp_ngrams)
  if not all(correct):
    return 0.0
  bp = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
  return 100 * bp * math.exp(sum(math.log(c / t) for c, t in zip(correct, total)) / 4)


TOKENIZED = [
    # Clipping: "the" counts at most twice.
    (["the the the the cat sat on the mat"], ["the cat sat on the mat"]),
    # Shorter hypothesis: brevity penalty below 1.
    (["a b c d e", "x y z w"], ["a b c d e f g", "x y z w v"]),
    # No 4-gram match anywhere: multi-bleu.perl scores 0, where exp smoothing would not.
    (["a b c x d e f"], ["a b c d e f"]),
    (["Der Vize ##AT##-##AT## Präsident sagte : „ Nein . “", "Es regnet ."],
     ["Der Vize ##AT##-##AT## Präsident sagte : „ Ja . “", "Es regnet heute ."]),
]


@pytest.mark.parametrize("hypotheses,references", TOKENIZED)
def test_multi_bleu_equals_brute_force(hypotheses, references):
  expected = brute_force_multi_bleu(hypotheses, references)
  assert bleu.multi_bleu(hypotheses, references).score == pytest.approx(expected, abs=1e-9)


def test_tokenized_bleu_tokenizes_splits_then_scores():
  hypotheses = ["Der Vize-Präsident sagte: „Nein.“", "Es regnet."]
  references = ["Der Vize-Präsident sagte: „Ja.“", "Es regnet heute."]
  assert [bleu.moses_tokenize(h, "de") for h in hypotheses] == [
      "Der Vize-Präsident sagte : „ Nein . “", "Es regnet ."]
  score = bleu.tokenized_bleu(hypotheses, references, "de")
  assert score.score == pytest.approx(brute_force_multi_bleu(*TOKENIZED[-1]), abs=1e-9)
  assert "tok:moses-de|split:compound-atat|smooth:none" in score.signature


def test_lowercased_tokenized_bleu_ignores_case_and_splits_punctuation():
  hypotheses = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball!"]
  references = ["ein Hund läuft über eine Wiese .", "zwei Männer spielen Fußball!"]
  lowered = [["ein", "hund", "läuft", "über", "die", "wiese", "."],
             ["zwei", "männer", "spielen", "fußball", "!"]]
  expected = brute_force_multi_bleu(
      [" ".join(t) for t in lowered],
      ["ein hund läuft über eine wiese .", "zwei männer spielen fußball !"])
  score = bleu.lowercased_tokenized_bleu(hypotheses, references, "de")
  assert score.score == pytest.approx(expected, abs=1e-9) and 0 < expected < 100
  assert "case:lc|tok:moses-de" in score.signature
  assert score.score > bleu.tokenized_bleu(hypotheses, references, "de").score  # Case counted.


def test_scores_on_toy_text_match_sacrebleu_api():
  hypotheses, references = ["Das ist ein kleiner Test ."], ["Das ist ein kleiner Test !"]
  assert bleu.sacrebleu_score(hypotheses, references).score == pytest.approx(
      scoring.bleu(hypotheses, references).score)
  with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
    bleu.chrf(hypotheses, references * 2)


def perturb(line, number):
  """A deterministic imperfect translation: drop every 7th word, swap a pair, drop a hyphen."""
  words = [w for i, w in enumerate(line.split()) if i % 7 != 6]
  if number % 3 == 0 and len(words) > 3:
    i = number % (len(words) - 1)
    words[i], words[i + 1] = words[i + 1], words[i]
  if number % 4 == 0:
    words = [w.replace("-", "", 1) for w in words]
  return " ".join(words)


@pytest.fixture
def newstest_files(shared_dir, tmp_path):
  reference = os.path.join(shared_dir, NEWSTEST2014_DE)
  if not os.path.exists(reference):
    pytest.skip(f"{reference} is absent")
  with open(reference, encoding="utf-8") as f:
    lines = f.read().splitlines()
  translation = tmp_path / "perturbed.de"
  translation.write_text("\n".join(perturb(l, n) for n, l in enumerate(lines)) + "\n",
                         encoding="utf-8")
  return str(translation), reference


def test_t2t_bleu_equals_the_sacrebleu_command(newstest_files, tmp_path):
  translation, reference = newstest_files
  proc = subprocess.run([sys.executable, "-m", "sacrebleu", reference, "-i", translation,
                         "-m", "bleu", "chrf", "-f", "json", "-w", "4"],
                        capture_output=True, text=True, check=True)
  expected = {m["name"]: m for m in json.loads(proc.stdout)}

  scores = str(tmp_path / "scores.json")
  proc = run("t2t-bleu", f"--translation={translation}", f"--reference={reference}",
             f"--output_json={scores}")
  report = json.load(open(scores))
  assert report["lines"] == 3003
  for key, name in (("bleu", "BLEU"), ("chrf", "chrF2")):
    assert report[key]["score"] == pytest.approx(expected[name]["score"], abs=5e-5)
    assert report[key]["signature"] == expected[name]["signature"]
    assert f"{name} = {expected[name]['score']:.2f} (sacreBLEU {expected[name]['signature']})" \
        in proc.stdout.splitlines()
  tokenized = report["tokenized_bleu"]
  assert f"tokenized BLEU = {tokenized['score']:.2f} (multi-bleu.perl " in proc.stdout
  assert 0 < tokenized["score"] < 100 and tokenized["score"] != report["bleu"]["score"]


def test_t2t_bleu_user_errors(tmp_path):
  reference = tmp_path / "reference.de"
  reference.write_text("Ein Satz.\nNoch einer.\nUnd ein dritter.\n", encoding="utf-8")
  missing = str(tmp_path / "missing.de")
  one_line_error(run("t2t-bleu", f"--translation={missing}", f"--reference={reference}",
                     check=False), "--translation", missing, "no such file")

  short = tmp_path / "short.de"
  short.write_text("Ein Satz.\nNoch einer.\n", encoding="utf-8")
  one_line_error(run("t2t-bleu", f"--translation={short}", f"--reference={reference}",
                     check=False), "has 2 lines", "has 3")

  broken = tmp_path / "broken.de"
  broken.write_bytes(b"Ein Satz.\nKaputt \xff.\n")
  one_line_error(run("t2t-bleu", f"--translation={short}", f"--reference={broken}",
                     check=False), "--reference", str(broken), "line 2", "UTF-8")
