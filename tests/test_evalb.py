"""EVALB-compatible scoring: hand-computed cases from EVALB's README and source rules, real data."""

import os
import subprocess
import sys

import pytest

from t2tlite.data import linearize, trees
from t2tlite.metrics import evalb, scoring
from tests.helpers import sample_trees

GOLD = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))"


def one(gold, test, params=evalb.COLLINS):
  return evalb.score_sentence(1, gold, test, params)


def test_collins_prm_file_equals_the_built_in_defaults(shared_dir):
  path = os.path.join(shared_dir, "data", "ptb", "evalb", "COLLINS.prm")
  assert evalb.read_params(path) == evalb.COLLINS


def test_param_file_keys(tmp_path):
  path = tmp_path / "my.prm"
  path.write_text("# comment\nLABELED 0\nCUTOFF_LEN 25\nMAX_ERROR 3\nDELETE_LABEL TOP\n"
                  "DELETE_LABEL_FOR_LENGTH -NONE-\nEQ_LABEL ADVP PRT\nEQ_WORD colour color\n"
                  "QUOTE_LABEL POS\nDEBUG 0\n")
  params = evalb.read_params(str(path))
  assert params == evalb.EvalbParams(
      labeled=False, cutoff_len=25, max_error=3, delete_labels=("TOP",),
      delete_labels_for_length=("-NONE-",), eq_labels=(("ADVP", "PRT"),),
      eq_words=(("colour", "color"),), quote_labels=("POS",), debug=0)
  path.write_text("LABELED 1\nCUTOFF_LEN forty\n")
  with pytest.raises(evalb.EvalbError, match="my.prm: line 2: CUTOFF_LEN 'forty' is not an integer"):
    evalb.read_params(str(path))


def test_identical_trees_score_100():
  s = one(GOLD, GOLD)
  # TOP deleted, "." deleted with its word: S NP VP PP NP over 6 words.
  assert (s.status, s.matched, s.gold, s.test, s.crossing, s.words, s.correct_tags,
          s.length) == (0, 5, 5, 5, 0, 6, 6, 7)


def test_attachment_error_scores_by_hand():
  # The PP moves from the VP to the S: VP [2,6] becomes VP [2,3]; 4 of 5 brackets match.
  test = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (PP (IN on) (NP (DT the) (NN mat))) (. .)))"
  s = one(GOLD, test)
  assert (s.matched, s.gold, s.test, s.crossing) == (4, 5, 5, 0)
  result = evalb.evaluate([GOLD, GOLD], [GOLD, test])
  assert result.all.recall == pytest.approx(100 * 9 / 10)
  assert result.all.precision == pytest.approx(100 * 9 / 10)
  assert result.all.f1 == pytest.approx(90.0)
  assert result.all.complete_match == pytest.approx(50.0)


def test_crossing_brackets_are_counted_per_test_bracket():
  gold = "(S (A (X w1) (X w2)) (B (X w3) (X w4)))"
  test = "(S (X w1) (D (X w2) (X w3)) (X w4))"  # D [1,3] crosses A [0,2] and B [2,4]: one test bracket.
  s = one(gold, test)
  assert (s.matched, s.gold, s.test, s.crossing) == (1, 3, 2, 1)


def test_totals_line_cross_column_is_evalbs_total_crossing():
  """evalb.c print_total prints TOTAL_crossing there: the crossing test brackets of the valid
  sentences summed (error and skip sentences add none), not an average or a sentence count."""
  gold = "(S (A (X w1) (X w2)) (B (X w3) (X w4)))"
  cross_one = "(S (X w1) (D (X w2) (X w3)) (X w4))"
  two = "(S (X w1) (D (X w2) (X w3) (X w4)) )"  # D [1,4] crosses A [0,2]: 1.
  error = "(S (A (X w1) (X w9)) (B (X w3) (X w4)))"  # Words differ: error, not counted.
  result = evalb.evaluate([gold, gold, gold, gold], [cross_one, two, gold, error])
  assert [s.crossing for s in result.sentences[:3]] == [1, 1, 0]
  assert result.sentences[3].status == 1
  totals = result.report(per_sentence=False).splitlines()[1]
  fields = totals.split()
  # recall precision matched gold test CROSS words tags accuracy
  assert len(fields) == 9 and int(fields[5]) == 2
  assert result.all.average_crossing == pytest.approx(2 / 3)


def test_function_tags_equivalences_and_deleted_labels():
  gold = "(TOP (S (NP-SBJ (PRP He)) (VP (VBD looked) (PRT (RP up)))))"
  test = "(TOP (S=2 (NP (PRP He)) (VP (VBD looked) (ADVP-DIR (RP up)))))"  # ADVP = PRT (EQ_LABEL).
  assert (one(gold, test).matched, one(gold, test).gold) == (4, 4)
  unlabeled = evalb.EvalbParams(labeled=False, delete_labels=("TOP",))
  relabeled = test.replace("ADVP-DIR", "NP")
  assert one(gold, relabeled).matched == 3
  assert one(gold, relabeled, unlabeled).matched == 4


def test_punctuation_is_deleted_by_tag_and_brackets_over_nothing_vanish():
  gold = "(TOP (S (NP (NNP Al)) (VP (VBD left)) (. .)))"
  test = "(TOP (S (NP (NNP Al)) (VP (VBD left)) (PUNCT (. .))))"  # PUNCT spans no kept word.
  s = one(gold, test)
  assert (s.matched, s.gold, s.test, s.words) == (3, 3, 3, 2)
  # Tagged XX, the "." stays a word in the test only: EVALB's length error.
  s = one(gold, test.replace("(. .)", "(XX .)"))
  assert s.status == 1 and s.errors == ["Length unmatch (2|3)"]


def test_repeated_unary_brackets_match_min_n_m():
  # README [7] 5: n gold and m test copies of a bracket give min(n, m) matches.
  gold = "(S (NP (NP (DT the) (NN man))) (VP (VBD slept)))"
  test = "(S (NP (DT the) (NN man)) (VP (VBD slept)))"
  s = one(gold, test)
  assert (s.matched, s.gold, s.test) == (3, 4, 3)  # recall 3/4, precision 100%
  s = one(test, gold)
  assert (s.matched, s.gold, s.test) == (3, 3, 4)


def test_error_skip_and_length_cutoff_accounting():
  long_words = " ".join(f"(NN w{i})" for i in range(41))
  long_gold = f"(TOP (S {long_words} (-NONE- *T*)))"  # 41 words: over the cutoff.
  traces = " ".join("(-NONE- *)" for _ in range(5))
  short_gold = f"(TOP (S (NP (NN a) {traces}) (VP (VB b)) (, ,)))"  # Length 3: traces not counted.
  gold = [GOLD, long_gold, short_gold, GOLD, GOLD]
  test = [GOLD,
          f"(TOP (S {long_words}))",
          "(TOP (S (NP (NN a)) (VP (VB b)) (, ,)))",
          "(TOP (S (NP (DT The) (NN dog)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))",
          ""]  # No words: skipped.
  result = evalb.evaluate(gold, test)
  statuses = [s.status for s in result.sentences]
  assert statuses == [0, 0, 0, 1, 2]
  assert [s.length for s in result.sentences] == [7, 41, 3, 7, 7]
  assert result.sentences[3].errors == ["Words unmatch (cat|dog)"]
  assert (result.all.sentences, result.all.error, result.all.skip, result.all.valid) == (5, 1, 1, 3)
  assert (result.cutoff.sentences, result.cutoff.error, result.cutoff.skip) == (4, 1, 1)
  assert (result.all.matched, result.all.gold) == (5 + 1 + 3, 5 + 1 + 3)
  assert (result.cutoff.matched, result.cutoff.gold) == (5 + 3, 5 + 3)


def test_stops_where_evalb_stops():
  params = evalb.EvalbParams(max_error=2)
  bad = "(S (NN x))"
  gold, test = ["(S (NN y))"] * 4, [bad] * 4
  evalb.evaluate(gold[:3], test[:3], params)  # Errors 1-3: EVALB goes on (0, 1, 2 > 2 false).
  with pytest.raises(evalb.EvalbFatal, match="line 4: error 4 exceeds MAX_ERROR 2"):
    evalb.evaluate(gold, test, params)
  result = evalb.evaluate(gold, test, params, stop_at_max_error=False)
  assert result.all.error == 4 and result.errors_past_max == 1
  with pytest.raises(evalb.EvalbFatal, match="cannot read 'x'"):
    evalb.evaluate(["(S (NN x))"], ["(S (NN x ))"])  # A word not directly followed by ')'.


def test_quote_fix_reinserts_a_quote_deleted_in_one_file_only():
  # 2006 fix: the gold tags the quote '' (deleted), the test POS (kept); QUOTE_LABEL puts it back.
  params = evalb.EvalbParams(delete_labels=("TOP", "''"), quote_labels=("''", "POS"))
  gold = "(TOP (S (NP (NNS dogs) ('' ')) (VP (VBD ran))))"
  test = "(TOP (S (NP (NNS dogs) (POS ')) (VP (VBD ran))))"
  s = one(gold, test, params)
  assert (s.status, s.words, s.matched, s.gold, s.test) == (0, 3, 3, 3, 3)
  assert s.correct_tags == 2  # '' vs POS on the reinserted quote.
  s = one(gold, test, evalb.EvalbParams(delete_labels=("TOP", "''")))
  assert s.status == 1


def test_sentence_row_matches_the_readme_example():
  # EVALB README [4]: "   1    8    0  100.00 100.00     5      5    5      0      6     5    83.33"
  row = evalb.SentenceResult(1, 8, 0, matched=5, gold=5, test=5, crossing=0, words=6,
                             correct_tags=5).row()
  assert row == "   1    8    0  100.00 100.00     5      5    5      0      6     5    83.33"


def test_gold_against_gold_on_the_whole_sample_is_100(shared_dir):
  sample = sample_trees(shared_dir)
  gold = [trees.evalb_line(t) for t in sample]
  result = evalb.evaluate(gold, gold)
  assert result.all.sentences == 3914 and result.all.valid == 3914
  assert (result.all.f1, result.all.complete_match, result.all.tagging_accuracy) == (100, 100, 100)
  # Length cutoff: words whose tag is not -NONE-, counted independently from the trees.
  assert result.cutoff.sentences == sum(
      sum(tag != "-NONE-" for tag, _ in t.tagged_words()) <= 40 for t in sample)


def test_delinearized_gold_scores_100_after_tags_from_gold(shared_dir):
  sample = sample_trees(shared_dir)
  gold = [trees.evalb_line(t) for t in sample]
  parses = [linearize.delinearize(target, source.split()).to_string()
            for source, target in map(linearize.gold_pair, sample)]
  scores = scoring.score(parses, gold, ("parse_f1",))
  assert scores["parse_f1"] == 100 and scores["parse_complete_match"] == 100
  assert scores["parse_errors"] == 0
  # Without the gold tags, EVALB keeps XX-tagged punctuation: a length error per such sentence.
  raw = evalb.evaluate(gold, parses, stop_at_max_error=False)
  punctuation = set(evalb.COLLINS.delete_labels) - {"TOP", "-NONE-"}
  with_punct = sum(any(tag in punctuation for tag, _ in t.tagged_words()) for t in sample)
  assert raw.all.error == with_punct


def test_t2t_parse_eval_prints_evalbs_summary(tmp_path, shared_dir):
  gold = tmp_path / "gold"
  test = tmp_path / "test"
  gold.write_text(f"{GOLD}\n{GOLD}\n")
  test.write_text(GOLD + "\n" + GOLD.replace("(VP (VBD sat) (PP", "(VP (VBD sat)) (PP")
                  .replace("(NN mat)))) (.", "(NN mat))) (.") + "\n")
  prm = os.path.join(shared_dir, "data", "ptb", "evalb", "COLLINS.prm")
  proc = subprocess.run([sys.executable, "-m", "t2tlite.bin.t2t_parse_eval", f"--gold={gold}",
                         f"--test={test}", f"--evalb_params={prm}",
                         f"--output_json={tmp_path / 's.json'}"],
                        capture_output=True, text=True, check=True)
  lines = proc.stdout.splitlines()
  assert lines[3] == "   1    7    0  100.00 100.00     5      5    5      0      6     6   100.00"
  assert lines[4] == "   2    7    0   80.00  80.00     4      5    5      0      6     6   100.00"
  assert "Bracketing FMeasure       =  90.00" in lines
  assert "-- len<=40 --" in lines
  bad = subprocess.run([sys.executable, "-m", "t2tlite.bin.t2t_parse_eval", f"--gold={gold}",
                        f"--test={prm}"], capture_output=True, text=True)
  assert bad.returncode == 2
  assert bad.stderr.strip().splitlines()[-1].endswith(f"--gold={gold} has 2 lines but "
                                                      f"--test={prm} has 66")
