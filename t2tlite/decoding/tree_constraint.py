"""Constrained decoding for parsing: every finished hypothesis is a well-formed tree.

The parser's target (`t2tlite.data.linearize`) is a tree written depth first
as whole symbols `(LABEL`, `XX`, `)LABEL`. Unconstrained, a search may emit
any token anywhere, and the output then needs repair (`linearize.delinearize`).
`TreeConstraint` is a token constraint for `search.beam_search` and
`search.greedy_search`: at each step only tokens that keep the prefix
completable to a valid linearization may be chosen. A valid linearization of a
sentence of n words is

- one tree: a single top-level constituent (`(L ... )L`), then EOS;
- exactly n `XX` (one per source word), each inside a constituent;
- every `)L` closes the innermost open constituent, whose label is L;
- no empty constituent (a constituent dominates at least one `XX`);
- no opening bracket once all n `XX` are placed (it could only stay empty);
- at most `max_depth` constituents open at once;
- at most `max_open_run` opening brackets in a row (before the next word or
  closing bracket): the sample's train trees never open more than 6 in a row,
  while an undertrained model, free to, opens the same label dozens of times
  (`(NP (NP (NP ...`) before a word;
- with `no_unary_repeat`, no constituent whose only child is a constituent of
  the same label (`(NP (NP ... )NP )NP`): 21 in the sample's 3396 train trees,
  while an undertrained model writes about 4 per sentence, each a bracket that
  EVALB counts against precision. A constituent may then not close while its
  only child has its label, and such a child may not close once no word is
  left to give its parent a second child (so every prefix still completes);
- it fits the search's length limit: a token is allowed only if the shortest
  completion after it (the words left, then one closing bracket per open
  constituent) still fits before the EOS is forced.

With `target_words` (the problem option that writes each word in place of its
`XX`), a word slot takes the source's own pieces instead of `XX`: exactly the
next source piece, in order, and once a word has begun, only its next piece
until the word is whole (no bracket inside a word). "Words left" then counts
the source pieces not yet placed, so the length rule is the same. A finished
hypothesis is then a tree whose words are the source's pieces, in order.

Under these rules every allowed prefix can be completed, so every hypothesis the
search finishes is such a tree, and since the only token allowed after a
complete tree is EOS, hypotheses end as soon as their tree is complete.

The per-hypothesis state is a few small tensors (words left, depth, a fixed
[rows, max_depth] stack of open labels, whether the innermost constituent is
still empty, tokens left before the forced EOS; with `target_words` also the
source ids and the position of the next source piece); the search reorders it with
the surviving beams like the model's cache, inside the compiled loop.

The constraint API (what the searches call; other constraints, e.g. for
sampling, implement the same three methods):

- `initial_state(inputs, max_lengths)` -> nested tensors [batch, ...];
- `mask(state)` -> bool [rows, vocab], the tokens allowed next;
- `update(state, tokens)` -> the state after appending tokens [rows].

Written in `keras.ops`, so the same rules run in TensorFlow's search
(search.py) and in the JAX one (jax_search.py, on machines without TensorFlow):
the tensors are those of the Keras backend in use.
"""

import typing
from typing import Optional, Sequence

import numpy as np
from keras import ops

from t2tlite.data import linearize

WORD_BOUNDARY = "\u2581"  # sentencepiece's mark for the space before a piece.
NO_CHILD, MANY = -2, -1  # TreeState.only_child values besides a child's label.


class TreeState(typing.NamedTuple):
  """Per-hypothesis constraint state; every field has leading dim rows."""
  words_left: typing.Any  # int32 [rows]: XX still to place (target_words: source pieces).
  depth: typing.Any       # int32 [rows]: constituents open.
  stack: typing.Any       # int32 [rows, max_depth]: label index of each open constituent.
  empty: typing.Any       # bool [rows]: the innermost open constituent has no word yet.
  budget: typing.Any      # int32 [rows]: tokens that may still come before the EOS.
  open_run: typing.Any    # int32 [rows]: opening brackets since the last word or closing one.
  only_child: typing.Any = ()  # no_unary_repeat: int32 [rows, max_depth], per open
                         # constituent the label of its one child so far if that is a
                         # constituent; NO_CHILD, or MANY (a word, or more than one child). Else ().
  source: typing.Any = ()    # target_words: int32 [rows, length], the source ids; else ().
  position: typing.Any = ()  # target_words: int32 [rows], index of the next source piece; else ().


def tree_token(piece: str) -> str:
  """A vocabulary piece as a tree token: the leading word boundary removed."""
  return piece[len(WORD_BOUNDARY):] if piece.startswith(WORD_BOUNDARY) else piece


def _int(x):
  return ops.cast(x, "int32")


def _at(table, index):
  """table [rows, n] at int32 index [rows] -> [rows] (a per-row gather)."""
  return ops.take_along_axis(table, index[:, None], axis=1)[:, 0]


class _Allowed(typing.NamedTuple):
  """What each prefix may take next; every field has leading dim rows."""
  open_labels: typing.Any  # bool [rows, labels]: may open a constituent of label k.
  word_id: typing.Any      # int32 [rows]: the word slot's token (XX, or the next source piece).
  word: typing.Any         # bool [rows]: may take word_id.
  close_id: typing.Any     # int32 [rows]: the innermost constituent's closing bracket.
  close: typing.Any        # bool [rows]: may take close_id.
  eos: typing.Any          # bool [rows]: may end.


class TreeConstraint:
  """Allows only tokens that keep the prefix a completable tree (module docstring).

  Args:
    target_pieces: the target vocabulary, piece of each id. Pieces that read
      `(L` and `)L` (after a leading word boundary, if any) for a label L that
      has both become brackets; the piece `XX` is the pre-terminal; every other
      piece is never allowed, except EOS.
    source_word_starts: bool per source id, true for the pieces that begin a
      word (the source's word count is the count of such pieces); pad and EOS
      must be false.
    eos_id: the EOS id.
    max_depth: most constituents open at once (the stack's size).
    max_open_run: most opening brackets in a row (0: no bound).
    no_unary_repeat: forbid a constituent whose only child has its label.
    target_words: word slots take the source's pieces, not `XX` (module
      docstring); the target vocabulary must then be the source's (shared).
    pad_id: the padding id of the source (target_words: not a piece to place).
  """

  def __init__(self, target_pieces: Sequence[str], source_word_starts: Sequence[bool],
               eos_id: int, max_depth: int, target_words: bool = False, pad_id: int = 0,
               max_open_run: int = 0, no_unary_repeat: bool = False):
    # The arguments, for `config`: a constraint built where the encoders are (TensorFlow)
    # is rebuilt from them where only the search runs (JAX on a GPU machine).
    self._config = dict(target_pieces=list(target_pieces),
                        source_word_starts=[bool(b) for b in source_word_starts],
                        eos_id=int(eos_id), max_depth=int(max_depth),
                        target_words=bool(target_words), pad_id=int(pad_id),
                        max_open_run=int(max_open_run), no_unary_repeat=bool(no_unary_repeat))
    if max_depth < 1:
      raise ValueError(f"max_depth={max_depth} must be >= 1")
    if max_open_run < 0:
      raise ValueError(f"max_open_run={max_open_run} must be >= 0")
    tokens = [tree_token(p) for p in target_pieces]
    opens = {t[1:]: i for i, t in enumerate(tokens)
             if len(t) > 1 and t[0] == "(" and ")" not in t}
    closes = {t[1:]: i for i, t in enumerate(tokens)
              if len(t) > 1 and t[0] == ")" and "(" not in t}
    self.labels = sorted(set(opens) & set(closes))
    xx = [i for i, t in enumerate(tokens) if t == linearize.POS_TOKEN]
    if not self.labels or not (xx or target_words):
      raise ValueError("the target vocabulary has no whole tree symbols (`(L`, `)L`, `XX`); "
                       "generate the data with the problem option tree_symbols=true")
    vocab = len(target_pieces)
    if target_words and len(source_word_starts) != vocab:
      raise ValueError(f"target_words needs one vocabulary for source and target; the source "
                       f"has {len(source_word_starts)} pieces, the target {vocab}")
    label_of = np.full([vocab], -1, np.int32)
    is_open = np.zeros([vocab], bool)
    is_close = np.zeros([vocab], bool)
    for k, label in enumerate(self.labels):
      label_of[opens[label]] = label_of[closes[label]] = k
      is_open[opens[label]] = True
      is_close[closes[label]] = True
    is_xx = np.zeros([vocab], bool)
    if not target_words:
      is_xx[xx[0]] = True
    self.vocab_size = vocab
    self.max_depth = max_depth
    self.max_open_run = max_open_run
    self.no_unary_repeat = no_unary_repeat
    self.eos_id = eos_id
    self.pad_id = pad_id
    self.target_words = target_words
    # numpy tables: each search converts them to its backend's constants where it traces.
    self._open_ids = np.array([opens[label] for label in self.labels], np.int32)
    self._close_ids = np.array([closes[label] for label in self.labels], np.int32)
    self._xx_id = -1 if target_words else xx[0]
    self._label_of = label_of
    self._is_open = is_open
    self._is_close = is_close
    self._is_xx = is_xx
    self._word_starts = np.asarray(source_word_starts, bool)

  @classmethod
  def from_encoders(cls, input_encoder, target_encoder, eos_id: int, max_depth: int,
                    pad_id: int = 0, target_words: bool = False,
                    max_open_run: int = 0, no_unary_repeat: bool = False) -> "TreeConstraint":
    """From sentencepiece encoders (`subword.SubwordEncoder`): their pieces name the tokens."""
    def pieces(encoder):
      processor = encoder.processor
      return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    source = pieces(input_encoder)
    starts = [p.startswith(WORD_BOUNDARY) and i not in (pad_id, eos_id)
              for i, p in enumerate(source)]
    return cls(pieces(target_encoder), starts, eos_id, max_depth, target_words, pad_id,
               max_open_run, no_unary_repeat)

  def config(self) -> dict:
    """The constructor's arguments, JSON-ready: `TreeConstraint(**config)` is this constraint."""
    return dict(self._config)

  # --- The constraint API ---
  def initial_state(self, inputs, max_lengths) -> TreeState:
    """inputs int32 [batch, length] source ids (EOS-terminated, padded); max_lengths int32 [batch]."""
    inputs = _int(inputs)
    if self.target_words:
      placed = ~ops.equal(inputs, self.pad_id) & ~ops.equal(inputs, self.eos_id)
      pieces = ops.sum(_int(placed), axis=1)
      state = self.initial_state_for_words(pieces, max_lengths)
      return state._replace(source=inputs, position=ops.zeros_like(pieces))
    words = ops.sum(_int(ops.take(self._word_starts, inputs)), axis=1)
    return self.initial_state_for_words(words, max_lengths)

  def initial_state_for_words(self, num_words, max_lengths) -> TreeState:
    """The state before the first token, from word counts int32 [batch] (XX targets)."""
    num_words = _int(num_words)
    rows = ops.shape(num_words)[0]
    return TreeState(
        words_left=num_words,
        depth=ops.zeros((rows,), "int32"),
        stack=ops.zeros((rows, self.max_depth), "int32"),
        empty=ops.zeros((rows,), "bool"),
        budget=_int(max_lengths),
        open_run=ops.zeros((rows,), "int32"),
        only_child=(ops.full((rows, self.max_depth), NO_CHILD, "int32")
                    if self.no_unary_repeat else ()))

  def _next_piece(self, state: TreeState):
    """(int32 [rows] the next source piece, bool [rows] whether it continues a begun word)."""
    last = ops.shape(state.source)[1] - 1
    piece = _at(state.source, ops.minimum(state.position, last))
    within = ((state.words_left > 0) & (state.position > 0)
              & ~ops.take(self._word_starts, piece))
    return piece, within

  def _words_not_begun(self, state: TreeState):
    """int32 [rows]: words with no piece placed yet (XX targets: the XX still to place)."""
    if not self.target_words:
      return state.words_left
    length = ops.shape(state.source)[1]
    ahead = ops.arange(length, dtype="int32")[None] >= state.position[:, None]
    starts = ops.take(self._word_starts, state.source)
    return ops.sum(_int(ahead & starts), axis=1)

  def _rules(self, state: TreeState) -> "_Allowed":
    """Which kinds of token each prefix may take next (the rules of the module docstring)."""
    w, d, budget = state.words_left, state.depth, state.budget
    rows = ops.shape(w)[0]
    # Shortest completion after each kind of token: the words left, then a close per open
    # constituent; it must fit in the tokens left after this one.
    can_open = (w > 0) & (d < self.max_depth) & (w + d + 1 <= budget - 1)
    if self.max_open_run:
      can_open &= state.open_run < self.max_open_run
    can_xx = (w > 0) & (d > 0) & (w - 1 + d <= budget - 1)
    top = ops.maximum(d - 1, 0)  # The innermost open constituent's slot.
    innermost = _at(state.stack, top)  # [rows]
    if self.target_words:  # The word slot is the next source piece; no bracket inside a word.
      word_id, within = self._next_piece(state)
    else:
      word_id = ops.full((rows,), self._xx_id, "int32")
    can_close = ((d > 0) & ~state.empty & ((d > 1) | (w == 0))
                 & (w + d - 1 <= budget - 1))
    can_eos = (d == 0) & (w == 0)
    open_labels = ops.ones((rows, len(self.labels)), "bool")
    if self.no_unary_repeat:
      # A "pending" constituent's only child has its label: it cannot close before it gains
      # another child, which takes a word of its own. Every prefix stays completable while the
      # words not yet begun cover the pending constituents and an empty innermost one.
      words = self._words_not_begun(state)
      is_open_slot = ops.arange(self.max_depth, dtype="int32")[None] < d[:, None]
      pending = ops.sum(_int(is_open_slot & ops.equal(state.only_child, state.stack)), axis=1)
      inner_only = _at(state.only_child, top)
      inner_pending = (d > 0) & ops.equal(inner_only, innermost)
      can_close &= ~inner_pending
      # A second child, bracket or word, ends the innermost's pending.
      settled = pending - _int(inner_pending)
      if self.target_words:  # A piece inside a begun word places no new word.
        can_xx &= within | (settled <= words - 1)
      else:
        can_xx &= settled <= words - 1
      # Opening L: itself empty, and the innermost turns pending when L is its label and first child.
      first_same = ((d > 0) & ops.equal(inner_only, NO_CHILD))[:, None] & ops.equal(
          ops.arange(len(self.labels), dtype="int32")[None], innermost[:, None])
      open_labels = settled[:, None] + 1 + _int(first_same) <= words[:, None]
    if self.target_words:
      can_open &= ~within
      can_close &= ~within
    return _Allowed(open_labels=open_labels & can_open[:, None],
                    word_id=word_id, word=can_xx,
                    close_id=ops.take(self._close_ids, innermost), close=can_close,
                    eos=can_eos)

  def candidates(self, state: TreeState):
    """(ids int32 [rows, C], allowed bool [rows, C]): every token allowed next is listed once.

    C = labels + 3 (each opening bracket, the innermost's closing one, the word
    slot, EOS): a few dozen of the thousands in the vocabulary, so beam search
    ranks these instead of every token (search.py, "Candidate lists"). Each
    row's ids are ascending, so ranking them breaks ties as ranking the whole
    vocabulary does (lower id first); an id that appears twice (a source piece
    that reads like a bracket) is allowed once, if either copy is.
    """
    rules = self._rules(state)
    rows = ops.shape(rules.word_id)[0]
    ids = ops.concatenate([ops.broadcast_to(self._open_ids[None], (rows, len(self.labels))),
                           ops.stack([rules.close_id, rules.word_id,
                                      ops.full((rows,), self.eos_id, "int32")], axis=1)], axis=1)
    allowed = ops.concatenate([rules.open_labels,
                               ops.stack([rules.close, rules.word, rules.eos], axis=1)], axis=1)
    # Ascending ids, an allowed copy first among equal ids (equal keys are equal entries, so
    # a plain sort of the keys is enough); later copies are not allowed.
    keys = ops.sort(ids * 2 + _int(~allowed), axis=1)
    ids, allowed = keys // 2, ops.equal(keys % 2, 0)
    repeated = ops.concatenate([ops.zeros((rows, 1), "bool"),
                                ops.equal(ids[:, 1:], ids[:, :-1])], axis=1)
    return ids, allowed & ~repeated

  def mask(self, state: TreeState):
    """bool [rows, vocab]: the tokens that keep each prefix completable (`candidates`, spread).

    A scatter of the C listed ids per row (each id is allowed in at most one
    copy, so the sum is 0 or 1), not a [rows, C, vocab] comparison.
    """
    ids, allowed = self.candidates(state)
    rows, width = ops.shape(ids)[0], ops.shape(ids)[1]
    row_of = ops.broadcast_to(ops.arange(rows, dtype="int32")[:, None], (rows, width))
    index = ops.reshape(ops.stack([row_of, ids], axis=-1), (-1, 2))
    spread = ops.scatter(index, ops.reshape(_int(allowed), (-1,)), (rows, self.vocab_size))
    return spread > 0

  def update(self, state: TreeState, tokens) -> TreeState:
    """The state after appending tokens int32 [rows] (clipped, so any token is safe)."""
    tokens = _int(tokens)
    if self.target_words:
      piece, _ = self._next_piece(state)
      word = ops.equal(tokens, piece) & (state.words_left > 0)
    else:
      word = ops.take(self._is_xx, tokens)
    opened = ops.take(self._is_open, tokens) & ~word
    closed = ops.take(self._is_close, tokens) & ~word & (state.depth > 0)
    label = ops.take(self._label_of, tokens)
    slots = ops.arange(self.max_depth, dtype="int32")[None]
    slot = ops.minimum(state.depth, self.max_depth - 1)
    at_slot = ops.equal(slots, slot[:, None])
    stack = ops.where(at_slot & opened[:, None], label[:, None], state.stack)
    depth = state.depth + _int(opened) - _int(closed)
    only_child = ()
    if self.no_unary_repeat:
      # The innermost constituent gains a child: a word (MANY) or the one just opened.
      innermost = ops.equal(slots, ops.maximum(state.depth - 1, 0)[:, None]) & (
          state.depth > 0)[:, None]
      child = ops.where(opened, label, MANY)[:, None]
      gained = ops.where(ops.equal(state.only_child, NO_CHILD), child, MANY)
      only_child = ops.where(innermost & (opened | word)[:, None], gained, state.only_child)
      only_child = ops.where(at_slot & opened[:, None], NO_CHILD, only_child)
    return TreeState(
        words_left=state.words_left - _int(word),
        depth=ops.clip(depth, 0, self.max_depth),
        stack=stack,
        empty=ops.where(opened, True, ops.where(word | closed, False, state.empty)),
        budget=state.budget - 1,
        open_run=ops.where(opened, state.open_run + 1, 0),
        only_child=only_child,
        source=state.source,
        position=(state.position + _int(word)) if self.target_words else ())


def make_tree_constraint(decode_hparams, input_encoder, target_encoder, eos_id: int,
                         target_words: bool = False) -> Optional[TreeConstraint]:
  """The constraint `decode_hparams` asks for (`constrain_trees`), or None.

  target_words: the targets write the source's words, not `XX` (the parsing
  problems' option of that name).
  """
  if not getattr(decode_hparams, "constrain_trees", False):
    return None
  return TreeConstraint.from_encoders(input_encoder, target_encoder, eos_id,
                                      decode_hparams.tree_max_depth, target_words=target_words,
                                      max_open_run=decode_hparams.tree_max_open_run,
                                      no_unary_repeat=decode_hparams.tree_no_unary_repeat)
