"""Penn Treebank trees: reading bracketed text, writing it back, and the parser's normalisation.

A tree is a `Tree(label, children)`; a child is a `Tree` or a word (`str`). A
pre-terminal is a tree whose only child is a word: `(NNP Vinken)`. The `.mrg`
files of the Penn Treebank (LDC99T42 `parsed/mrg/wsj/NN/*.mrg`, NLTK's 10%
sample `treebank/combined/*.mrg`) hold one tree after another, each wrapped
in an unlabeled bracket: `( (S (NP-SBJ ...) ...) )`.

`normalize` is what the parser learns from (Vinyals & Kaiser et al. 2014,
"Grammar as a Foreign Language", the Transformer paper's reference [37]):

1. the unlabeled (or TOP) root bracket is removed when it holds one tree;
2. `-NONE-` pre-terminals (traces, empty elements) are removed, and then every
   constituent left dominating nothing, recursively (`(SBAR (-NONE- 0) (S
   (-NONE- *T*-1)))` disappears whole), as EVALB's DELETE_LABEL -NONE- does;
3. function tags and co-indices are cut from non-terminal labels at the first
   `-` or `=` after the first character (`NP-SBJ-1` -> `NP`, `NP=2` -> `NP`,
   `ADVP-PRD-LOC=3` -> `ADVP`), EVALB's own rule (its README section [7] 2);
   labels such as `ADVP|PRT` are kept as written.

POS tags stay in the tree; `linearize` replaces them by `XX` (its step 4).
"""

import dataclasses
import re
from typing import Iterator, List, Optional, Union

from t2tlite.errors import UserError

TRACE = "-NONE-"  # The Penn Treebank's tag for empty elements (traces, null complementizers).
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class TreeError(UserError):
  """Unreadable bracketed text; one line naming the file and line."""


@dataclasses.dataclass
class Tree:
  label: str  # Non-terminal or POS label ("" for the PTB's unlabeled root bracket).
  children: List[Union["Tree", str]]  # Sub-trees, or the one word of a pre-terminal.

  @property
  def is_preterminal(self) -> bool:
    return len(self.children) == 1 and isinstance(self.children[0], str)

  def words(self) -> List[str]:
    return [w for _, w in self.tagged_words()]

  def tagged_words(self) -> List[tuple]:
    """(tag, word) of every pre-terminal, left to right."""
    return [(node.label, node.children[0]) for node in self.preterminals()]

  def preterminals(self) -> List["Tree"]:
    """The pre-terminal nodes, left to right."""
    out = []
    stack = [self]
    while stack:
      node = stack.pop()
      if node.is_preterminal:
        out.append(node)
      else:
        stack.extend(c for c in reversed(node.children) if isinstance(c, Tree))
    return out

  def to_string(self) -> str:
    """One line, EVALB's format: `(S (NP (DT the) (NN dog)) (VP (VBZ barks)))`.

    A word is followed directly by `)`: EVALB reads `(NN dog )` as a bracket
    with more than two elements, an error.
    """
    parts = []

    def write(node):
      if isinstance(node, str):
        parts.append(node)
        return
      parts.append("(" + node.label)
      for child in node.children:
        parts.append(" ")
        write(child)
      parts.append(")")
    write(self)
    return "".join(parts)

  def copy(self) -> "Tree":
    return Tree(self.label, [c if isinstance(c, str) else c.copy() for c in self.children])


def read_trees(text: str, source: str = "<text>") -> Iterator[Tree]:
  """Every top-level bracketed tree in `text`; errors name `source` and the line.

  `(` followed directly by a word is a labeled node, `(` followed by `(` the
  PTB's unlabeled root. Text outside brackets and unbalanced brackets are errors.
  """
  stack: List[Tree] = []
  expect_label = False  # True right after "(": a word there is the node's label.
  line, position = 1, 0
  for match in _TOKEN.finditer(text):
    line += text.count("\n", position, match.start())
    position = match.start()
    token = match.group()
    if token == "(":
      stack.append(Tree("", []))
      expect_label = True
      continue
    was_label, expect_label = expect_label, False
    if token == ")":
      if not stack:
        raise TreeError(f"{source}: line {line}: ')' closes nothing")
      node = stack.pop()
      if stack:
        stack[-1].children.append(node)
      else:
        yield node
    elif not stack:
      raise TreeError(f"{source}: line {line}: {token!r} outside any bracket")
    elif was_label:
      stack[-1].label = token
    else:
      stack[-1].children.append(token)
  if stack:
    raise TreeError(f"{source}: line {line}: {len(stack)} bracket(s) never closed")


def read_tree(text: str, source: str = "<text>") -> Tree:
  """The one tree in `text` (e.g. a line of a gold or decoded file)."""
  trees = list(read_trees(text, source))
  if len(trees) != 1:
    raise TreeError(f"{source}: expected one tree, found {len(trees)}")
  return trees[0]


def strip_function_tag(label: str) -> str:
  """`NP-SBJ-1` -> `NP`: cut at the first `-` or `=` past position 0 (EVALB README [7] 2)."""
  for i, char in enumerate(label):
    if i and char in "-=":
      return label[:i]
  return label


def remove_traces(tree: Tree) -> Optional[Tree]:
  """The tree without `-NONE-` pre-terminals and what then dominates nothing (None if empty)."""
  if tree.is_preterminal:
    return None if tree.label == TRACE else Tree(tree.label, list(tree.children))
  children = [c for c in (remove_traces(c) if isinstance(c, Tree) else c
                          for c in tree.children) if c is not None]
  return Tree(tree.label, children) if children else None


def strip_function_tags(tree: Tree) -> Tree:
  """Function tags cut from every non-terminal label; POS tags are left alone."""
  if tree.is_preterminal:
    return Tree(tree.label, list(tree.children))
  return Tree(strip_function_tag(tree.label),
              [strip_function_tags(c) if isinstance(c, Tree) else c for c in tree.children])


def strip_root(tree: Tree) -> Tree:
  """Removes an unlabeled or TOP root that holds one tree; any other root is named TOP."""
  if tree.label in ("", "TOP") and len(tree.children) == 1 and isinstance(tree.children[0], Tree):
    return tree.children[0]
  return Tree(tree.label or "TOP", tree.children)


def normalize(tree: Tree) -> Optional[Tree]:
  """The tree the parser learns (module docstring, steps 1-3); None if it has no words."""
  without_traces = remove_traces(tree)
  if without_traces is None:
    return None
  return strip_function_tags(strip_root(without_traces))


def collapse_unary_repeats(tree: Tree) -> int:
  """Merges, in place, every constituent into its parent when it is the parent's only child and
  has the parent's label: `(NP (NP (DT a) (NN b)))` -> `(NP (DT a) (NN b))`. Returns how many.

  Such a chain is one bracket written twice (same label, same span): EVALB
  scores the copy as a wrong bracket. Gold trees rarely have one (21 of the
  PTB sample's 3396 training trees, none of its dev trees), but a parser that
  learned from them writes them far more often (`tree_collapse_unary_repeat`).
  The root itself is kept: only constituents below it merge.
  """
  merged = 0
  stack = [tree]
  while stack:
    node = stack.pop()
    for child in node.children:
      if isinstance(child, str):
        continue
      while (len(child.children) == 1 and isinstance(child.children[0], Tree)
             and child.children[0].label == child.label
             and not child.children[0].is_preterminal):
        child.children = child.children[0].children
        merged += 1
      stack.append(child)
  return merged


def evalb_line(tree: Tree) -> str:
  """A gold tree as an EVALB line: the PTB's unlabeled root renamed TOP (deleted by COLLINS.prm)."""
  return Tree(tree.label or "TOP", tree.children).to_string()
