"""Treebank reading, the parser's normalisation, and Vinyals et al.'s linearization and its inverse."""

import collections

import pytest

from t2tlite.data import linearize, trees
from t2tlite.data.linearize import Repairs, delinearize
from t2tlite.data.trees import Tree
from tests.helpers import sample_trees


def all_xx(tree):
  """The tree with every POS tag replaced by XX (what linearization forgets)."""
  if tree.is_preterminal:
    return Tree("XX", list(tree.children))
  return Tree(tree.label, [all_xx(c) for c in tree.children])


def test_reads_ptb_trees_with_the_unlabeled_root():
  text = "( (S (NP-SBJ (NNP Mr.) (NNP Vinken)) (VP (VBZ is)) (. .)) )\n((NP (DT the)))"
  first, second = trees.read_trees(text)
  assert first.label == "" and first.children[0].label == "S"
  assert first.words() == ["Mr.", "Vinken", "is", "."]
  assert first.tagged_words()[0] == ("NNP", "Mr.")
  assert second.to_string() == "( (NP (DT the)))"
  assert trees.evalb_line(first) == "(TOP (S (NP-SBJ (NNP Mr.) (NNP Vinken)) (VP (VBZ is)) (. .)))"


@pytest.mark.parametrize("text,fragment", [
    ("(S (NP (DT a))", "line 1: 1 bracket(s) never closed"),
    ("(S (DT a)))", "line 1: ')' closes nothing"),
    ("(S (DT a))\nstray", "line 2: 'stray' outside any bracket"),
])
def test_unreadable_text_names_the_line(text, fragment):
  with pytest.raises(trees.TreeError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
    list(trees.read_trees(text, "f.mrg"))


def test_traces_and_what_dominates_only_traces_are_removed():
  # EVALB README [6] 3: "(VP (VBD reported) (SBAR (-NONE- 0) (S (-NONE- *T*-1))))" -> "(VP (VBD reported))".
  tree = trees.read_tree("(VP (VBD reported) (SBAR (-NONE- 0) (S (-NONE- *T*-1))))")
  assert trees.remove_traces(tree).to_string() == "(VP (VBD reported))"
  assert trees.remove_traces(trees.read_tree("(NP (-NONE- *))")) is None


@pytest.mark.parametrize("label,stripped", [
    ("NP-SBJ", "NP"), ("NP-SBJ-1", "NP"), ("NP=2", "NP"), ("ADVP-PRD-LOC=3", "ADVP"),
    ("NP-SBJ=1-3", "NP"), ("ADVP|PRT", "ADVP|PRT"), ("S", "S")])
def test_function_tags_are_cut_at_the_first_dash_or_equals(label, stripped):
  assert trees.strip_function_tag(label) == stripped


def test_linearization_of_the_papers_example():
  # Vinyals & Kaiser et al. 2014, Figure 1, with POS tags normalised to XX.
  tree = trees.normalize(trees.read_tree(
      "( (S (NP-SBJ (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)) )"))
  source, target = linearize.linearize(tree)
  assert source == "John has a dog ."
  assert target == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"


def test_every_sample_tree_round_trips(shared_dir):
  """Linearize then delinearize all 3914 trees: the normalised tree, tags XX, no repair."""
  sample = sample_trees(shared_dir)
  assert len(sample) == 3914
  repairs = Repairs()
  identical = 0
  for tree in sample:
    source, target = linearize.gold_pair(tree)
    back = delinearize(target, source.split(), repairs)
    expected = all_xx(trees.normalize(tree))
    identical += back == Tree("TOP", [expected])
  assert identical == 3914
  assert repairs["sentences"] == 3914 and repairs["repaired_sentences"] == 0
  assert sum(repairs[k] for k in linearize.REPAIR_KINDS) == 0


def test_linearization_with_words_writes_each_word_for_its_xx():
  tree = trees.normalize(trees.read_tree(
      "( (S (NP-SBJ (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)) )"))
  source, target = linearize.linearize(tree, target_words=True)
  assert source == "John has a dog ."
  assert target == "(S (NP John )NP (VP has (NP a dog )NP )VP . )S"


def test_every_sample_tree_round_trips_with_words(shared_dir):
  """Both forms of all 3914 trees: the same source, the same tree back, no repair."""
  repairs = Repairs()
  identical = 0
  for tree in sample_trees(shared_dir):
    source, target = linearize.gold_pair(tree, target_words=True)
    xx_source, xx_target = linearize.gold_pair(tree)
    assert source == xx_source
    # The other tokens are the source words, in order; each in place of an XX.
    bracket = [linearize.is_open(t) or linearize.is_close(t) for t in target.split()]
    assert [t for t, b in zip(target.split(), bracket) if not b] == source.split()
    assert " ".join(t if b else "XX" for t, b in zip(target.split(), bracket)) == xx_target
    back = delinearize(target, source.split(), repairs, target_words=True)
    identical += back == Tree("TOP", [all_xx(trees.normalize(tree))])
    assert back == delinearize(xx_target, source.split())
  assert identical == 3914
  assert repairs["sentences"] == 3914 and repairs["repaired_sentences"] == 0


WORDS = "John has a dog .".split()


@pytest.mark.parametrize("decoded,expected,kinds", [
    # Well formed.
    ("(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S",
     "(TOP (S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .)))", {}),
    # A close with nothing open is dropped.
    ("(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S )S",
     "(TOP (S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .)))", {"extra_close": 1}),
    # )NP closing a VP closes the VP anyway.
    ("(S (NP XX )NP (VP XX XX XX )NP XX )S",
     "(TOP (S (NP (XX John)) (VP (XX has) (XX a) (XX dog)) (XX .)))", {"mismatched_close": 1}),
    # Open at the end: closed there.
    ("(S (NP XX )NP (VP XX (NP XX XX",
     "(TOP (S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .)))",
     {"unclosed": 3, "missing_words": 1}),
    # One XX too many: the extra slot is dropped (and so is the NP it alone filled).
    ("(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX (NP XX )NP )S",
     "(TOP (S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .)))",
     {"extra_words": 1, "empty_constituent": 1}),
    # Two words short: appended to the last top-level constituent.
    ("(S (NP XX )NP (VP XX (NP XX )NP )VP )S",
     "(TOP (S (NP (XX John)) (VP (XX has) (NP (XX a))) (XX dog) (XX .)))", {"missing_words": 2}),
    # Garbage tokens are skipped; nothing decoded at all leaves the words under TOP.
    ("( foo", "(TOP (XX John) (XX has) (XX a) (XX dog) (XX .))",
     {"unknown_token": 2, "missing_words": 5}),
    ("", "(TOP (XX John) (XX has) (XX a) (XX dog) (XX .))", {"missing_words": 5}),
    # Two top-level constituents stay side by side under TOP.
    ("(NP XX )NP (VP XX XX XX XX )VP",
     "(TOP (NP (XX John)) (VP (XX has) (XX a) (XX dog) (XX .)))", {}),
])
def test_delinearize_repairs_and_counts(decoded, expected, kinds):
  repairs = Repairs()
  tree = delinearize(decoded, WORDS, repairs)
  assert tree.to_string() == expected
  assert tree.words() == WORDS  # Always exactly the source words.
  assert {k: repairs[k] for k in linearize.REPAIR_KINDS if repairs[k]} == kinds
  assert repairs["repaired_sentences"] == (1 if kinds else 0)


@pytest.mark.parametrize("decoded,expected,kinds", [
    ("(S (NP John )NP (VP has (NP a dog )NP )VP . )S",
     "(TOP (S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .)))", {}),
    # A word other than the source's: the source word takes its slot.
    ("(S (NP John )NP (VP has (NP a cat )NP )VP . )S",
     "(TOP (S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .)))", {"wrong_word": 1}),
    # XX is a word like any other here (and not this sentence's).
    ("(S (NP XX )NP (VP has a dog . )VP )S",
     "(TOP (S (NP (XX John)) (VP (XX has) (XX a) (XX dog) (XX .))))", {"wrong_word": 1}),
    # Too many words, too few: as with XX.
    ("(S John has a dog . again )S",
     "(TOP (S (XX John) (XX has) (XX a) (XX dog) (XX .)))", {"extra_words": 1}),
    ("(S (NP John )NP has )S",
     "(TOP (S (NP (XX John)) (XX has) (XX a) (XX dog) (XX .)))", {"missing_words": 3}),
])
def test_delinearize_with_words_repairs_and_counts(decoded, expected, kinds):
  repairs = Repairs()
  tree = delinearize(decoded, WORDS, repairs, target_words=True)
  assert tree.to_string() == expected
  assert {k: repairs[k] for k in linearize.REPAIR_KINDS if repairs[k]} == kinds


def test_repairer_counts_across_sentences():
  repairer = linearize.TreeRepairer()
  repairer("John has a dog .", "(S XX XX XX XX XX )S")
  repairer("John has a dog .", "(S XX XX XX )S )S")
  assert repairer.summary() == ("1 of 2 decoded trees repaired (extra_close 1, "
                                "missing_words 2)")


def test_tags_from_gold_fills_placeholders_only_where_the_words_agree():
  gold = "(TOP (S (NP-SBJ (NNP John)) (VP (VBZ has) (NP (-NONE- *T*) (DT a) (NN dog))) (. .)))"
  test = "(TOP (S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .)))"
  filled, count = linearize.tags_from_gold(test, gold)
  assert filled == "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))"
  assert count == 5
  other_words = test.replace("dog", "cat")
  assert linearize.tags_from_gold(other_words, gold) == (other_words, 0)
  tagged = "(TOP (S (NP (NN John)) (VP (VBZ has))))"
  assert linearize.tags_from_gold(tagged, gold) == (tagged, 0)


@pytest.mark.parametrize("line, expected, merged", [
    ("(TOP (S (NP (NP (DT a) (NN b))) (VP (VBZ c))))",
     "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c))))", 1),
    # A chain of three is one constituent; a different label between two NPs breaks the chain.
    ("(TOP (NP (NP (NP (DT a) (NN b)))))", "(TOP (NP (DT a) (NN b)))", 2),
    ("(TOP (NP (QP (NP (DT a) (NN b)))))", "(TOP (NP (QP (NP (DT a) (NN b)))))", 0),
    # Not an only child: both NPs stay.
    ("(TOP (NP (NP (DT a)) (PP (IN of) (NP (NN b)))))",
     "(TOP (NP (NP (DT a)) (PP (IN of) (NP (NN b)))))", 0),
    # The root is kept even when its only child has its label; a pre-terminal is never merged.
    ("(TOP (TOP (NN a)))", "(TOP (TOP (NN a)))", 0),
    ("(TOP (NN (NN a)))", "(TOP (NN (NN a)))", 0),
])
def test_collapse_unary_repeats(line, expected, merged):
  tree = trees.read_tree(line)
  assert trees.collapse_unary_repeats(tree) == merged
  assert tree.to_string() == expected


def _constituents(tree):
  """(label, start, end, parent's label or None for the root, parent's child count) of every
  constituent below the root, spans in words, as EVALB counts brackets."""
  out = []

  def walk(node, start, parent):
    if node.is_preterminal:
      return start + 1
    end = start
    for child in node.children:
      end = walk(child, end, node)
    if parent is not None:  # The root merges with nothing (collapse_unary_repeats).
      out.append((node.label, start, end, None if parent is tree else parent.label,
                  len(parent.children)))
    return end
  walk(tree, 0, None)
  return out


def test_collapse_unary_repeats_drops_exactly_the_repeated_brackets_of_the_sample(shared_dir):
  """On the sample's real trees: the collapsed tree keeps every bracket but those of
  constituents that are the only child of a same-label parent (listed beforehand by brute force
  over all brackets), and all its words."""
  seen = 0
  for tree in sample_trees(shared_dir):
    normal = trees.normalize(tree)
    if normal is None:
      continue
    root = Tree("TOP", [normal])
    before = _constituents(root)
    expected = collections.Counter(
        (label, start, end) for label, start, end, parent, siblings in before
        if not (parent == label and siblings == 1))
    words = root.words()
    merged = trees.collapse_unary_repeats(root)
    assert collections.Counter(c[:3] for c in _constituents(root)) == expected
    assert merged == len(before) - sum(expected.values())
    assert root.words() == words
    seen += merged
  assert seen > 20
