"""The tree constraint against brute force on a toy grammar, and on real parsing data.

Truth is an independent validity check (`valid_tree`, a plain parse of the token
list) applied to every token sequence of a toy vocabulary up to the length
limit: the valid trees. From them, the tokens allowed after any prefix (those
that start some valid completion) and the best tree under a fake model with
fixed log-probabilities. The constrained searches must reproduce both.

The same for targets that write words (`target_words`): each word slot holds
the source's own pieces, checked by `valid_word_tree`.
"""

import collections
import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from t2tlite.decoding import search
from t2tlite.decoding.tree_constraint import TreeConstraint

# Toy vocabulary: pad, EOS, brackets for labels A and B, XX, a word piece and an opening
# bracket without a closing one (neither may ever be chosen).
PIECES = ["<pad>", "</s>", "\u2581(A", "\u2581(B", "\u2581)A", "\u2581)B", "\u2581XX",
          "\u2581word", "\u2581(C"]
EOS = 1
TREE_IDS = [2, 3, 4, 5, 6, 7, 8]
TOKEN = {i: p[1:] for i, p in enumerate(PIECES)}


def valid_tree(ids, n_words, max_depth):
  """Is `ids` (no EOS) one well-formed tree with n_words XX, depth <= max_depth, no empty constituent?"""
  stack, filled, words, roots = [], [], 0, 0
  for i in ids:
    t = TOKEN[i]
    if t in ("(A", "(B"):
      if not stack:
        roots += 1
      stack.append(t[1:])
      filled.append(False)
      if len(stack) > max_depth:
        return False
    elif t in (")A", ")B"):
      if not stack or stack[-1] != t[1:] or not filled[-1]:
        return False
      stack.pop()
      filled.pop()
      if filled:
        filled[-1] = True
    elif t == "XX":
      if not stack:
        return False
      words += 1
      filled[-1] = True
    else:
      return False
  return not stack and roots == 1 and words == n_words


# Targets that write words: the toy vocabulary gains the word piece "\u2581u" (9) and the
# continuation piece "v" (10); "\u2581XX" (6) and "\u2581word" (7) are word pieces like any other.
WORD_PIECES = ["\u2581u", "v"]
WORD_IDS = [6, 7, 9, 10]
WORD_TOKEN = {**TOKEN, 9: "u", 10: "v"}


def starts_word(piece_id):
  return (PIECES + WORD_PIECES)[piece_id].startswith("\u2581")


def valid_word_tree(ids, source, max_depth):
  """Is `ids` (no EOS) one tree over exactly the source pieces, depth <= max_depth, none empty?

  Stripped of brackets, `ids` is `source`; every bracket stands between two
  words (before a word-initial piece, or at the end), never inside one; the
  brackets alone nest into one tree of labels A and B in which every
  constituent holds a piece.
  """
  brackets, pieces = [], []
  for i in ids:
    if i in WORD_IDS:
      pieces.append(i)
    elif WORD_TOKEN[i] in ("(A", "(B", ")A", ")B"):
      k = len(pieces)
      if 0 < k < len(source) and not starts_word(source[k]):
        return False
      brackets.append((WORD_TOKEN[i], k))
    else:
      return False
  if pieces != list(source):
    return False
  stack, roots = [], 0
  for t, k in brackets:
    if t[0] == "(":
      roots += not stack
      stack.append((t[1:], k))
      if len(stack) > max_depth:
        return False
    else:
      if not stack or stack[-1][0] != t[1:] or stack[-1][1] == k:  # Mismatched or empty.
        return False
      stack.pop()
  # Every piece inside the root: the root opens before the first and closes after the last.
  return (not stack and roots == 1 and brackets[0][1] == 0
          and brackets[-1][1] == len(source))


def all_valid_trees(n_words, max_depth, max_length, source=None):
  """Every valid tree of at most max_length tokens, by depth-first enumeration.

  source: None for XX targets (`valid_tree` over n_words), or the source
  pieces for targets that write words (`valid_word_tree`).
  Prefixes are cut only when no extension can repair them (a close with
  nothing or another label open, too deep, too many words or a word piece
  other than the next source piece, anything after the root closed);
  validity itself is `valid_tree`'s or `valid_word_tree`'s.
  """
  out = []
  if source is None:
    ids, is_word, valid = TREE_IDS, (lambda i, words: TOKEN[i] == "XX" and words < n_words), (
        lambda prefix: valid_tree(prefix, n_words, max_depth))
  else:
    ids = [i for i in TREE_IDS if i not in WORD_IDS] + WORD_IDS
    is_word = lambda i, words: i in WORD_IDS and words < len(source) and source[words] == i
    valid = lambda prefix: valid_word_tree(prefix, source, max_depth)

  def extend(prefix, stack, words, closed_root):
    if valid(prefix):
      out.append(tuple(prefix))
    if len(prefix) == max_length:
      return
    for i in ids:
      t = WORD_TOKEN[i] if source is not None else TOKEN[i]
      word = is_word(i, words)
      bracket = not word and t[:1] in "()" and len(t) > 1
      if not word and not bracket:
        continue  # A word too many, or a piece other than the next one: never valid.
      if closed_root or (t.startswith(")") and (not stack or stack[-1] != t[1:])):
        continue
      if bracket and t.startswith("(") and len(stack) == max_depth:
        continue
      new_stack = stack + [t[1:]] if bracket and t.startswith("(") else (
          stack[:-1] if bracket else stack)
      extend(prefix + [i], new_stack, words + word, bracket and t.startswith(")") and not new_stack)

  extend([], [], 0, False)
  return out


def allowed_after(prefix, valid):
  """Brute-force allowed set: tokens that start a valid completion of prefix (EOS if complete)."""
  n = len(prefix)
  allowed = {v[n] for v in valid if len(v) > n and v[:n] == prefix}
  if prefix in valid:
    allowed.add(EOS)
  return allowed


def exact_beam(valid, max_length):
  """A beam wide enough to be exact: the most distinct prefixes of one length."""
  return max(sum(1 for v in {w[:k] for w in valid} if len(v) == k)
             for k in range(max_length + 1))


def assert_best_beams(result, truth, beam):
  """The search's finished beams are the brute-force best (score, tree) pairs, best first."""
  got = []
  for k in range(beam):
    if result.scores[0, k] > search.NEG_INF / 2:
      ids = list(result.ids[0, k].numpy())
      got.append((float(result.scores[0, k]), tuple(ids[:ids.index(EOS)])))
  kept = min(beam, len(truth))
  assert [g[1] for g in got] == [t[1] for t in truth[:kept]]
  assert np.allclose([g[0] for g in got], [t[0] for t in truth[:kept]], atol=1e-4)


def brute_force_greedy(step, valid):
  """Greedy by brute force: each step, the model's argmax over the brute-force allowed set."""
  prefix = ()
  while True:
    logits = step(tf.constant([prefix[-1] if prefix else 0]), len(prefix), {})[0].numpy()[0]
    token = max(allowed_after(prefix, valid), key=lambda t: logits[t])
    if token == EOS:
      return prefix
    prefix += (token,)


def constraint(max_depth):
  starts = [False, False] + [True] * (len(PIECES) - 2)
  return TreeConstraint(PIECES, starts, EOS, max_depth)


def initial_for_words(c, n_words, max_length):
  return c.initial_state_for_words(tf.constant([n_words]), tf.constant([max_length]))


def prefix_rows(c, prefixes, initial, read):
  """(prefix, its row of read(state after it)) for each of a prefix-closed set, shortest first.

  Each length's prefixes are one batch, each row one update of its parent's row: the
  brute-force checks visit thousands of prefixes, so one eager update and one read per
  length, not per prefix (the constraint treats rows alone: the same masks either way).
  """
  by_length = collections.defaultdict(list)
  for prefix in prefixes:
    by_length[len(prefix)].append(prefix)
  assert by_length[0] == [()], "prefixes must be prefix-closed, the empty one included"
  level, states = [()], initial
  for length in range(max(by_length) + 1):
    if length:
      parent_row = {prefix: row for row, prefix in enumerate(level)}
      level = sorted(by_length[length])
      parents = tf.constant([parent_row[prefix[:-1]] for prefix in level])
      states = c.update(search.gather_rows(states, parents),
                        tf.constant([prefix[-1] for prefix in level]))
    values = tf.nest.map_structure(lambda t: t.numpy(), read(states))
    for row, prefix in enumerate(level):
      yield prefix, tf.nest.map_structure(lambda v: v[row], values)


CASES = [(1, 2, 8), (2, 2, 10), (2, 3, 9), (3, 2, 11), (2, 2, 5), (3, 3, 6)]  # words, depth, length


@pytest.mark.parametrize("n_words,max_depth,max_length", CASES)
def test_mask_is_the_brute_force_set_of_tokens_that_start_a_valid_completion(
    n_words, max_depth, max_length):
  valid = set(all_valid_trees(n_words, max_depth, max_length))
  assert valid, "the toy case must have trees"
  assert all(v.count(6) == n_words for v in valid)
  prefixes = {v[:k] for v in valid for k in range(len(v) + 1)}
  c = constraint(max_depth)
  initial = initial_for_words(c, n_words, max_length)
  for prefix, mask in prefix_rows(c, prefixes, initial, c.mask):
    assert set(np.flatnonzero(mask)) == allowed_after(prefix, valid), prefix


def longest_open_run(ids):
  """Most opening brackets in a row in `ids` (XX targets)."""
  longest = run = 0
  for i in ids:
    run = run + 1 if TOKEN[i] in ("(A", "(B") else 0
    longest = max(longest, run)
  return longest


@pytest.mark.parametrize("n_words,max_depth,max_length,max_open_run",
                         [(2, 3, 10, 1), (2, 3, 10, 2), (1, 3, 8, 2)])
def test_open_run_bound_is_the_brute_force_set_of_trees_without_longer_runs(
    n_words, max_depth, max_length, max_open_run):
  """The bound removes exactly the trees that open more than max_open_run brackets in a row,
  and every prefix it allows still completes (the mask is the brute-force allowed set)."""
  assert_rule_is_brute_force(lambda v: longest_open_run(v) <= max_open_run, n_words, max_depth,
                             max_length, max_open_run=max_open_run)


def assert_rule_is_brute_force(keep, n_words, max_depth, max_length, **rule):
  """The constraint with `rule` allows after every prefix exactly the tokens that start a valid
  tree for which keep(tree) holds (XX targets); the rule must cut some trees and keep some."""
  everything = all_valid_trees(n_words, max_depth, max_length)
  valid = {v for v in everything if keep(v)}
  assert valid and len(valid) < len(everything), "the rule must cut some trees and keep some"
  prefixes = {v[:k] for v in valid for k in range(len(v) + 1)}
  starts = [False, False] + [True] * (len(PIECES) - 2)
  c = TreeConstraint(PIECES, starts, EOS, max_depth, **rule)
  initial = initial_for_words(c, n_words, max_length)
  for prefix, mask in prefix_rows(c, prefixes, initial, c.mask):
    assert set(np.flatnonzero(mask)) == allowed_after(prefix, valid), prefix


def has_unary_repeat(ids, token=None):
  """Whether a constituent's only child is a constituent of its label (any other token is a
  word piece, a child)."""
  token = token or TOKEN
  stack = []  # Per open constituent: [label, children, label of the first child or None].
  for i in ids:
    t = token[i]
    if t.startswith("("):
      if stack:
        stack[-1][1] += 1
        stack[-1][2] = t[1:] if stack[-1][1] == 1 else None
      stack.append([t[1:], 0, None])
    elif t.startswith(")"):
      label, children, first = stack.pop()
      if children == 1 and first == label:
        return True
    elif stack:
      stack[-1][1] += 1
  return False


@pytest.mark.parametrize("n_words,max_depth,max_length", [(1, 3, 8), (2, 3, 10)])
def test_no_unary_repeat_is_the_brute_force_set_of_trees_without_x_over_x(
    n_words, max_depth, max_length):
  """The rule removes exactly the trees with a constituent whose only child has its label,
  and every prefix it allows still completes (the mask is the brute-force allowed set)."""
  assert_rule_is_brute_force(lambda v: not has_unary_repeat(v), n_words, max_depth, max_length,
                             no_unary_repeat=True)


def test_the_toy_grammar_has_the_trees_counted_by_hand():
  # One word, depth 2: (L XX )L for 2 labels, and (L (M XX )M )L for 4 label pairs.
  assert len(all_valid_trees(1, 2, 8)) == 2 + 4
  assert len(all_valid_trees(1, 1, 8)) == 2
  assert all_valid_trees(1, 2, 2) == []


def fake_model(vocab, length, seed):
  """symbols_to_logits_fn with fixed logits per (position, previous token), and its log P."""
  table = np.random.RandomState(seed).normal(0, 2, [length + 2, vocab, vocab]).astype(np.float32)
  log_probs = table - np.log(np.exp(table).sum(-1, keepdims=True))

  def step(ids, step, state):
    return tf.gather(tf.constant(table)[step], ids), state

  def score(seq, alpha):  # seq ends in EOS; the start symbol is pad (0).
    prev = [0] + list(seq[:-1])
    total = sum(float(log_probs[k, p, t]) for k, (p, t) in enumerate(zip(prev, seq)))
    return total / ((5.0 + len(seq)) / 6.0) ** alpha

  return step, score


@pytest.mark.parametrize("n_words,max_depth,max_length,alpha",
                         [(1, 2, 8, 0.0), (2, 2, 10, 0.3), (2, 3, 9, 1.0), (3, 2, 11, 0.3),
                          (2, 2, 5, 0.3), (3, 3, 6, 0.6)])
def test_constrained_beam_search_returns_the_best_valid_trees(n_words, max_depth, max_length,
                                                               alpha):
  valid = all_valid_trees(n_words, max_depth, max_length)
  step, score = fake_model(len(PIECES), max_length, seed=n_words * 10 + max_depth + max_length)
  truth = sorted(((score(v + (EOS,), alpha), v) for v in valid), reverse=True)
  beam = exact_beam(valid, max_length)
  c = constraint(max_depth)
  start = tf.zeros([1], tf.int32)
  max_lengths = tf.constant([max_length])
  result = search.beam_search(
      step, start, {}, beam, alpha, max_lengths, max_length, EOS,
      constraint=c, constraint_state=c.initial_state_for_words(tf.constant([n_words]),
                                                               max_lengths))
  assert_best_beams(result, truth, beam)


@pytest.mark.parametrize("n_words,max_depth,max_length", CASES)
def test_constrained_greedy_search_takes_the_best_allowed_token_each_step(
    n_words, max_depth, max_length):
  valid = set(all_valid_trees(n_words, max_depth, max_length))
  step, _ = fake_model(len(PIECES), max_length, seed=7 + n_words)
  prefix = brute_force_greedy(step, valid)
  c = constraint(max_depth)
  max_lengths = tf.constant([max_length])
  result = search.greedy_search(
      step, tf.zeros([1], tf.int32), {}, max_lengths, max_length, EOS, constraint=c,
      constraint_state=c.initial_state_for_words(tf.constant([n_words]), max_lengths))
  ids = list(result.ids[0, 0].numpy())
  assert tuple(ids[:ids.index(EOS)]) == prefix
  assert prefix in valid


def test_constrained_beam_search_compiles_with_xla_and_matches_eager():
  n_words, max_depth, max_length = 2, 2, 10
  step, _ = fake_model(len(PIECES), max_length, seed=3)
  c = constraint(max_depth)

  def run(num_words):
    max_lengths = tf.fill(tf.shape(num_words), max_length)
    return search.beam_search(step, tf.zeros_like(num_words), {}, 4, 0.3, max_lengths,
                              max_length, EOS, constraint=c,
                              constraint_state=c.initial_state_for_words(num_words, max_lengths))

  words = tf.constant([n_words, 1, 3], tf.int32)
  eager = run(words)
  compiled = tf.function(run, jit_compile=True)(words)
  np.testing.assert_array_equal(eager.ids.numpy(), compiled.ids.numpy())
  for b, n in enumerate([2, 1, 3]):
    for k in range(4):
      ids = list(eager.ids[b, k].numpy())
      assert valid_tree(ids[:ids.index(EOS)], n, max_depth)


def test_source_words_are_counted_from_word_initial_pieces():
  # Source ids: 7 = "\u2581word" starts a word; a continuation piece would not.
  pieces = PIECES + ["ing"]
  starts = [p.startswith("\u2581") for p in pieces]
  starts[0] = starts[1] = False
  c = TreeConstraint(pieces, starts, EOS, 4)
  inputs = tf.constant([[7, 9, 7, 1, 0], [7, 1, 0, 0, 0]])
  state = c.initial_state(inputs, tf.constant([20, 20]))
  assert list(state.words_left.numpy()) == [2, 1]


def test_a_constraint_rebuilt_from_its_json_config_allows_what_it_allows():
  # recipes/parsing_gpu.py builds the constraint here and rebuilds it from JSON where the
  # search runs: every field must survive, so the masks agree on every prefix of the toy grammar.
  import json
  c = TreeConstraint(PIECES, [p == "\u2581word" for p in PIECES], EOS, 3, max_open_run=2,
                     no_unary_repeat=True)
  again = TreeConstraint(**json.loads(json.dumps(c.config())))
  assert again.config() == c.config()
  valid = all_valid_trees(2, 3, 7)
  prefixes = {tuple(t[:k]) for t in valid for k in range(len(t) + 1)}
  assert len(prefixes) > 20
  walks = [prefix_rows(x, prefixes, initial_for_words(x, 2, 7), x.mask) for x in (c, again)]
  for (prefix, mask), (_, mask_again) in zip(*walks):
    np.testing.assert_array_equal(mask, mask_again, str(prefix))


def test_a_vocabulary_without_tree_symbols_is_refused():
  with pytest.raises(ValueError, match="tree_symbols"):
    TreeConstraint(["<pad>", "</s>", "\u2581(", "NP", "\u2581)"], [False] * 5, EOS, 4)


# --- Targets that write words (target_words) ---
# (source pieces, max_depth, max_length): one and several words, a word of two and of three
# pieces, "\u2581XX" as an ordinary word, a budget that cuts the trees short.
WORD_CASES = [((7,), 2, 8), ((7, 10), 2, 9), ((9, 7), 2, 10), ((7, 10, 9), 2, 11),
              ((9, 10, 10), 3, 9), ((6, 7), 2, 9), ((7, 10, 9), 2, 7), ((9, 7, 10), 3, 8)]


def word_constraint(max_depth):
  pieces = PIECES + WORD_PIECES
  starts = [p.startswith("\u2581") for p in pieces]
  starts[0] = starts[1] = False
  return TreeConstraint(pieces, starts, EOS, max_depth, target_words=True)


def initial_for_source(c, source, max_length):
  return c.initial_state(tf.constant([list(source) + [EOS, 0]]), tf.constant([max_length]))


def word_state_after(c, prefix, source, max_length):
  state = initial_for_source(c, source, max_length)
  for token in prefix:
    state = c.update(state, tf.constant([token]))
  return state


def test_the_toy_grammar_with_words_has_the_trees_counted_by_hand():
  # One word of two pieces, depth 2: (L w v )L for 2 labels, (L (M w v )M )L for 4 pairs;
  # nothing may split the word, so (L w (M v )M )L and the like are not trees.
  assert len(all_valid_trees(0, 2, 8, source=(7, 10))) == 2 + 4
  assert valid_word_tree((2, 7, 10, 4), (7, 10), 2)
  assert not valid_word_tree((2, 7, 3, 10, 5, 4), (7, 10), 2)  # A bracket inside the word.
  assert not valid_word_tree((2, 7, 4), (7, 10), 2)  # A piece missing.
  assert not valid_word_tree((2, 9, 10, 4), (7, 10), 2)  # Another word.
  assert not valid_word_tree((2, 3, 5, 7, 10, 4), (7, 10), 2)  # An empty constituent.
  # Two words: a bracket may stand between them.
  assert valid_word_tree((2, 9, 3, 7, 10, 5, 4), (9, 7, 10), 2)
  assert not valid_word_tree((2, 9, 4, 2, 7, 10, 4), (9, 7, 10), 2)  # Two roots.


@pytest.mark.parametrize("source,max_depth,max_length", WORD_CASES)
def test_word_mask_is_the_brute_force_set_of_tokens_that_start_a_valid_completion(
    source, max_depth, max_length):
  valid = set(all_valid_trees(0, max_depth, max_length, source=source))
  assert valid, "the toy case must have trees"
  assert all([i for i in v if i in WORD_IDS] == list(source) for v in valid)
  prefixes = {v[:k] for v in valid for k in range(len(v) + 1)}
  c = word_constraint(max_depth)
  initial = initial_for_source(c, source, max_length)
  for prefix, mask in prefix_rows(c, prefixes, initial, c.mask):
    assert set(np.flatnonzero(mask)) == allowed_after(prefix, valid), prefix


@pytest.mark.parametrize("source,max_depth,max_length,alpha",
                         [((7,), 2, 8, 0.0), ((7, 10), 2, 9, 0.3), ((9, 7), 3, 9, 1.0),
                          ((7, 10, 9), 2, 11, 0.3), ((9, 10, 10), 3, 9, 0.6)])
def test_constrained_beam_search_with_words_returns_the_best_valid_trees(
    source, max_depth, max_length, alpha):
  valid = all_valid_trees(0, max_depth, max_length, source=source)
  vocab = len(PIECES) + len(WORD_PIECES)
  step, score = fake_model(vocab, max_length, seed=sum(source) + max_depth + max_length)
  truth = sorted(((score(v + (EOS,), alpha), v) for v in valid), reverse=True)
  beam = exact_beam(valid, max_length)
  c = word_constraint(max_depth)
  max_lengths = tf.constant([max_length])
  result = search.beam_search(
      step, tf.zeros([1], tf.int32), {}, beam, alpha, max_lengths, max_length, EOS,
      constraint=c, constraint_state=c.initial_state(tf.constant([list(source) + [EOS]]),
                                                     max_lengths))
  assert_best_beams(result, truth, beam)


@pytest.mark.parametrize("source,max_depth,max_length", WORD_CASES)
def test_constrained_greedy_search_with_words_takes_the_best_allowed_token_each_step(
    source, max_depth, max_length):
  valid = set(all_valid_trees(0, max_depth, max_length, source=source))
  step, _ = fake_model(len(PIECES) + len(WORD_PIECES), max_length, seed=11 + len(source))
  prefix = brute_force_greedy(step, valid)
  c = word_constraint(max_depth)
  max_lengths = tf.constant([max_length])
  result = search.greedy_search(
      step, tf.zeros([1], tf.int32), {}, max_lengths, max_length, EOS, constraint=c,
      constraint_state=c.initial_state(tf.constant([list(source) + [EOS]]), max_lengths))
  ids = list(result.ids[0, 0].numpy())
  assert tuple(ids[:ids.index(EOS)]) == prefix
  assert prefix in valid


def test_constrained_beam_search_with_words_compiles_with_xla_and_matches_eager():
  max_depth, max_length = 2, 12
  step, _ = fake_model(len(PIECES) + len(WORD_PIECES), max_length, seed=5)
  c = word_constraint(max_depth)
  sources = [(7, 10, 9), (9,), (9, 10, 10, 7)]
  inputs = tf.constant([list(s) + [EOS] + [0] * (5 - len(s)) for s in sources])

  def run(inputs):
    max_lengths = tf.fill(tf.shape(inputs)[:1], max_length)
    return search.beam_search(step, tf.zeros_like(inputs[:, 0]), {}, 4, 0.3, max_lengths,
                              max_length, EOS, constraint=c,
                              constraint_state=c.initial_state(inputs, max_lengths))

  eager = run(inputs)
  compiled = tf.function(run, jit_compile=True)(inputs)
  np.testing.assert_array_equal(eager.ids.numpy(), compiled.ids.numpy())
  for b, source in enumerate(sources):
    for k in range(4):
      ids = list(eager.ids[b, k].numpy())
      assert valid_word_tree(ids[:ids.index(EOS)], source, max_depth)


def test_words_need_one_vocabulary_for_source_and_target():
  with pytest.raises(ValueError, match="one vocabulary"):
    TreeConstraint(PIECES + WORD_PIECES, [True] * len(PIECES), EOS, 4, target_words=True)


def test_no_unary_repeat_with_words_is_the_brute_force_set_of_trees_without_x_over_x():
  """Targets that write words: a pending constituent needs a word not yet begun (the pieces
  of a begun word all stay in its constituent), the mask is the brute-force allowed set."""
  source, max_depth, max_length = (9, 10, 7), 2, 10  # "uv" (two pieces), then "word".
  everything = all_valid_trees(0, max_depth, max_length, source=source)
  valid = {v for v in everything if not has_unary_repeat(v, WORD_TOKEN)}
  assert valid and len(valid) < len(everything)
  prefixes = {v[:k] for v in valid for k in range(len(v) + 1)}
  c = word_constraint(max_depth)
  c.no_unary_repeat = True
  initial = initial_for_source(c, source, max_length)
  for prefix, mask in prefix_rows(c, prefixes, initial, c.mask):
    assert set(np.flatnonzero(mask)) == allowed_after(prefix, valid), prefix


@pytest.mark.parametrize("source,max_depth,max_length", WORD_CASES[:4])
def test_candidates_list_each_allowed_token_once_in_ascending_order(source, max_depth, max_length):
  valid = set(all_valid_trees(0, max_depth, max_length, source=source))
  prefixes = {v[:k] for v in valid for k in range(len(v) + 1)}
  c = word_constraint(max_depth)
  initial = initial_for_source(c, source, max_length)
  for prefix, (ids, allowed) in prefix_rows(c, prefixes, initial, c.candidates):
    ids, allowed = list(ids), list(allowed)
    assert ids == sorted(ids), prefix  # Ties then break as over the whole vocabulary.
    listed = [i for i, a in zip(ids, allowed) if a]
    assert sorted(listed) == sorted(allowed_after(prefix, valid)), prefix
    assert len(listed) == len(set(listed)), prefix


def test_a_source_piece_that_reads_like_a_bracket_is_a_candidate_once():
  # The source's only word is the piece "(A" (id 2): after "(B" opens the root, id 2 is both
  # the word slot and an opening bracket. Listed twice, it would enter the beam twice.
  c = word_constraint(2)
  state = word_state_after(c, (3,), (2,), 8)
  ids, allowed = (t.numpy()[0] for t in c.candidates(state))
  assert list(ids[allowed]).count(2) == 1
  assert set(np.flatnonzero(c.mask(state).numpy()[0])) == set(ids[allowed])


class _MaskOnly:
  """The tree constraint without `candidates`: beam search then ranks the whole vocabulary."""

  def __init__(self, constraint):
    self.mask, self.update = constraint.mask, constraint.update


@pytest.mark.parametrize("compiled", [False, True])
def test_beam_search_over_candidate_lists_equals_the_search_over_the_whole_vocabulary(compiled):
  max_depth, max_length, beam = 3, 14, 5
  vocab = len(PIECES) + len(WORD_PIECES)
  step, _ = fake_model(vocab, max_length, seed=23)
  c = word_constraint(max_depth)
  sources = [(7, 10, 9), (9,), (9, 10, 10, 7), (6, 7, 9)]
  inputs = tf.constant([list(s) + [EOS] + [0] * (5 - len(s)) for s in sources])

  def run(inputs, constraint):
    max_lengths = tf.fill(tf.shape(inputs)[:1], max_length)
    return search.beam_search(step, tf.zeros_like(inputs[:, 0]), {}, beam, 0.3, max_lengths,
                              max_length, EOS, constraint=constraint,
                              constraint_state=c.initial_state(inputs, max_lengths))

  results = []
  for constraint in (c, _MaskOnly(c)):
    fn = lambda x, constraint=constraint: run(x, constraint)
    results.append((tf.function(fn, jit_compile=True) if compiled else fn)(inputs))
  listed, whole = results
  assert int(listed.steps) == int(whole.steps)
  np.testing.assert_array_equal(listed.ids.numpy(), whole.ids.numpy())
  np.testing.assert_array_equal(listed.scores.numpy(), whole.scores.numpy())
  np.testing.assert_array_equal(listed.lengths.numpy(), whole.lengths.numpy())
