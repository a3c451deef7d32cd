"""Trees as token sequences and back: the parser's target side (Vinyals & Kaiser et al. 2014).

Source = the words; target = the normalised tree (`trees.normalize`) written
depth first, each constituent as `(LABEL ... )LABEL` and each pre-terminal as
`XX` (POS tags normalised away, as in "Grammar as a Foreign Language"):

  Pierre Vinken will join the board .
  (S (NP XX XX )NP (VP XX (VP XX (NP XX XX )NP )VP )VP XX )S

With `target_words` (a problem option, not the paper's form) each word is
written in place of its `XX`, so the target repeats the source in order and
the decoder can copy it instead of counting words:

  (S (NP Pierre Vinken )NP (VP will (VP join (NP the board )NP )VP )VP . )S

`delinearize` inverts either form for decoded output, which need not be well formed.
It always returns a tree over exactly the source words, repairing and
counting what it had to (`Repairs`), so every decoded sentence can be scored:

- `extra_close`: `)X` with nothing open: dropped;
- `mismatched_close`: `)X` closing an open `Y`: it closes the innermost open
  constituent anyway (the label on a closing bracket is redundant);
- `unclosed`: constituents still open at the end: closed there;
- `unknown_token`: anything else (a bare `(`, a stray word): dropped;
- `extra_words`: more `XX` than source words: the extra slots are dropped;
- `wrong_word` (`target_words` only): a word slot whose word is not the
  source word at that position: the source word is placed anyway;
- `missing_words`: fewer `XX` than source words: the rest are appended, as
  `XX` pre-terminals, to the last top-level constituent (so a sentence-level
  S still spans the sentence), or under the root if there is none;
- `empty_constituent`: a constituent that ends up dominating no word: dropped.

The result is rooted in `TOP` (deleted by EVALB's COLLINS.prm), holding the
decoded top-level constituents; `(TOP (S ...))` for a well-formed decode.
"""

import collections
from typing import Optional, Sequence, Tuple

from t2tlite.data import trees
from t2tlite.data.trees import Tree

POS_TOKEN = "XX"  # Every POS tag becomes this one token (Vinyals et al.'s normalisation).
ROOT = "TOP"  # Root label of delinearized trees; EVALB's COLLINS.prm deletes it.
REPAIR_KINDS = ("extra_close", "mismatched_close", "unclosed", "unknown_token", "extra_words",
                "wrong_word", "missing_words", "empty_constituent")
COLLAPSED = "unary_repeats_collapsed"  # Not a repair: a well-formed tree may have them too.


class Repairs(collections.Counter):
  """Counts of each repair kind, plus `sentences` seen and `repaired_sentences`."""

  def summary(self) -> str:
    kinds = ", ".join(f"{k} {self[k]}" for k in REPAIR_KINDS if self[k])
    collapsed = (f"; {self[COLLAPSED]} same-label unary chains collapsed" if self[COLLAPSED]
                 else "")
    return (f"{self['repaired_sentences']} of {self['sentences']} decoded trees repaired"
            + (f" ({kinds})" if kinds else "") + collapsed)


def is_open(token: str) -> bool:
  """`(LABEL`: an opening bracket."""
  return token.startswith("(") and len(token) > 1 and ")" not in token


def is_close(token: str) -> bool:
  """`)LABEL` (or a bare `)`): a closing bracket."""
  return token.startswith(")") and "(" not in token


def linearize(tree: Tree, target_words: bool = False) -> Tuple[str, str]:
  """(source words, target tokens) of an already normalised tree (`trees.normalize`).

  target_words: each pre-terminal written as its word, not `XX` (module docstring).
  A TOP root with several children (a treebank root holding more than one
  tree) is not written; its children follow one another, which `delinearize`
  gathers back under TOP.
  """
  tokens = []

  def write(node: Tree):
    if node.is_preterminal:
      tokens.append(node.children[0] if target_words else POS_TOKEN)
      return
    tokens.append("(" + node.label)
    for child in node.children:
      write(child)
    tokens.append(")" + node.label)

  for top in (tree.children if tree.label == ROOT else [tree]):
    write(top)
  return " ".join(tree.words()), " ".join(tokens)


def delinearize(target: str, words: Sequence[str], repairs: Optional[Repairs] = None,
                target_words: bool = False) -> Tree:
  """A `TOP`-rooted tree over exactly `words` from decoded target tokens (module docstring).

  target_words: every token that is not a bracket is a word slot (as `XX` is
  in the paper's form); the tree holds the source word there, tagged `XX`.
  """
  counts = collections.Counter()
  root = Tree(ROOT, [])
  stack = [root]
  used = 0

  def close():
    node = stack.pop()
    if node.children:
      stack[-1].children.append(node)
    else:
      counts["empty_constituent"] += 1

  for token in target.split():
    if token == POS_TOKEN or (target_words and not is_open(token) and not is_close(token)):
      if used < len(words):
        if target_words and token != words[used]:
          counts["wrong_word"] += 1
        stack[-1].children.append(Tree(POS_TOKEN, [words[used]]))
        used += 1
      else:
        counts["extra_words"] += 1
    elif is_open(token):
      stack.append(Tree(token[1:], []))
    elif is_close(token):
      if len(stack) == 1:
        counts["extra_close"] += 1
        continue
      if len(token) > 1 and token[1:] != stack[-1].label:
        counts["mismatched_close"] += 1
      close()
    else:
      counts["unknown_token"] += 1
  while len(stack) > 1:
    counts["unclosed"] += 1
    close()
  if used < len(words):
    counts["missing_words"] += len(words) - used
    host = root.children[-1] if root.children and not root.children[-1].is_preterminal else root
    host.children.extend(Tree(POS_TOKEN, [w]) for w in words[used:])
  if repairs is not None:
    repairs.update(counts)
    repairs["sentences"] += 1
    repairs["repaired_sentences"] += bool(counts)
  return root


def decoded_tree_line(target: str, source: str, repairs: Optional[Repairs] = None,
                      target_words: bool = False, collapse_unary_repeats: bool = False) -> str:
  """One decoded target line and its source line -> the EVALB line of the repaired tree.

  collapse_unary_repeats: then merge each constituent into a same-label parent
  it is the only child of (`trees.collapse_unary_repeats`), counted in `repairs`.
  """
  tree = delinearize(target, source.split(), repairs, target_words)
  if collapse_unary_repeats:
    merged = trees.collapse_unary_repeats(tree)
    if repairs is not None:
      repairs[COLLAPSED] += merged
  return tree.to_string()


def gold_pair(tree: Tree, target_words: bool = False) -> Optional[Tuple[str, str]]:
  """(source, target) a treebank tree trains on; None for a tree with no words (all traces)."""
  normal = trees.normalize(tree)
  return linearize(normal, target_words) if normal is not None else None


def tags_from_gold(test_line: str, gold_line: str, placeholder: str = POS_TOKEN) -> Tuple[str, int]:
  """The test tree with each `placeholder` tag replaced by the gold tag of its word.

  EVALB decides which words are punctuation (COLLINS.prm deletes the tags
  `, : `` '' .`) from each file's own tags, so a parse tagged only XX keeps
  its punctuation while the gold drops it: every sentence would be a length
  error. The model predicts no tags (Vinyals et al. normalise them away), so
  before scoring its trees take their tags from the gold tree (traces
  skipped), which changes no bracket. Tagging accuracy then measures nothing.
  Returns (line, tags filled); lines that do not parse, or whose words differ
  from the gold's, are returned unchanged for EVALB to judge.
  """
  if placeholder not in test_line:
    return test_line, 0
  try:
    test = trees.read_tree(test_line)
    gold = trees.remove_traces(trees.read_tree(gold_line))
  except trees.TreeError:
    return test_line, 0
  gold_tagged = gold.tagged_words() if gold is not None else []
  test_nodes = test.preterminals()
  if [n.children[0] for n in test_nodes] != [w for _, w in gold_tagged]:
    return test_line, 0
  filled = 0
  for node, (tag, _) in zip(test_nodes, gold_tagged):
    if node.label == placeholder:
      node.label = tag
      filled += 1
  return test.to_string(), filled



class TreeRepairer:
  """`(source line, decoded target) -> EVALB tree line`, counting repairs across calls.

  What `t2t-decoder` and the trainer's dev decoding apply to parsing output
  (`Problem.decode_postprocessor`); `summary()` is what they log.
  """

  def __init__(self, target_words: bool = False, collapse_unary_repeats: bool = False):
    self.repairs = Repairs()
    self.target_words = target_words  # The targets write words, not XX (`linearize`).
    self.collapse_unary_repeats = collapse_unary_repeats  # `decoded_tree_line`.

  def __call__(self, source: str, decoded: str) -> str:
    return decoded_tree_line(decoded, source, self.repairs, self.target_words,
                             self.collapse_unary_repeats)

  def summary(self) -> str:
    return self.repairs.summary()
