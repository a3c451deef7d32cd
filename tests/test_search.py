"""Tests of t2tlite.decoding.search against independent numpy truth.

The fake models are fixed next-token distributions that depend on the whole
prefix, which they can only know through their state: `PrefixModel` keeps a
running base-(vocab + 1) code of the prefix, `HashModel` a position cache of the
tokens (like a Transformer's key/value cache) that it hashes with a
per-sentence salt. A search that failed to reorder the state along with the
beams would read another hypothesis' prefix and get different probabilities.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from t2tlite.decoding.search import (NEG_INF, SearchResult, beam_search, greedy_search,
                                     length_penalty, tile_to_beams)

EOS = 1
PAD, A, B = 0, 2, 3  # Token names used by the hand-computed cases.


def np_log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max()
  return shifted - np.log(np.exp(shifted).sum())


def np_penalty(length, alpha):
  return ((5.0 + length) / 6.0) ** alpha


class PrefixModel:
  """Next-token distribution given explicitly per content prefix (uniform elsewhere)."""

  def __init__(self, vocab, decode_length, distributions):
    self.vocab = vocab
    self.base = vocab + 1
    table = np.zeros([self.base ** (decode_length + 1), vocab], np.float32)
    for prefix, probs in distributions.items():
      assert abs(sum(probs) - 1.0) < 1e-9, prefix
      table[self._code((0,) + prefix)] = np.log(np.asarray(probs, np.float64))
    self.table = tf.constant(table)

  def _code(self, prefix):
    code = 0
    for token in prefix:
      code = code * self.base + token + 1
    return code

  def initial_state(self, batch):
    return {"code": tf.zeros([batch], tf.int32)}

  def __call__(self, ids, step, state):
    code = state["code"] * self.base + ids + 1
    return tf.gather(self.table, code), {"code": code}


class HashModel:
  """Logits = table[hash(salt, start symbol + prefix)], prefix read from a position cache."""

  P = 97  # Number of table rows; hash values are taken modulo P.

  def __init__(self, table, decode_length):
    self.np_table = np.asarray(table, np.float32)
    assert self.np_table.shape[0] == self.P
    self.vocab = self.np_table.shape[1]
    self.table = tf.constant(self.np_table)
    self.width = decode_length + 1  # Positions 0..decode_length are fed.
    self.powers = tf.constant([pow(31, k, self.P) for k in range(self.width + 1)], tf.int32)

  def np_logits(self, salt, prefix):
    """Reference: the hash computed as a running recurrence over the prefix."""
    h = salt
    for token in prefix:
      h = (h * 31 + token + 1) % self.P
    return self.np_table[h]

  def initial_state(self, salts):
    salts = np.asarray(salts, np.int32)
    return {"salt": tf.constant(salts),
            "cache": {"tokens": tf.zeros([len(salts), self.width], tf.int32)}}

  def __call__(self, ids, step, state):
    positions = tf.range(self.width)
    tokens = tf.where(positions == step, ids[:, tf.newaxis], state["cache"]["tokens"])
    exponent = step - positions
    weight = tf.where(exponent >= 0, tf.gather(self.powers, tf.maximum(exponent, 0)), 0)
    h = (state["salt"] * tf.gather(self.powers, step + 1)
         + tf.reduce_sum((tokens + 1) * weight, axis=1)) % self.P
    return tf.gather(self.table, h), {"salt": state["salt"], "cache": {"tokens": tokens}}


def random_hash_model(seed, vocab, decode_length, eos_shift=0.0, scale=1.5):
  rng = np.random.default_rng(seed)
  table = rng.normal(size=[HashModel.P, vocab]) * scale
  table[:, EOS] += eos_shift
  return HashModel(table, decode_length)


def np_sequence_log_prob(model, salt, tokens):
  """log P(tokens) under a HashModel, tokens ending in EOS."""
  total, prefix = 0.0, (0,)
  for token in tokens:
    total += np_log_softmax(model.np_logits(salt, prefix))[token]
    prefix += (token,)
  return total


def brute_force(model, salt, max_length, alpha):
  """Every sequence (<= max_length content tokens, then EOS), best normalized score first."""
  content = [t for t in range(model.vocab) if t != EOS]
  hypotheses = []
  for n in range(max_length + 1):
    for prefix in itertools.product(content, repeat=n):
      tokens = prefix + (EOS,)
      score = np_sequence_log_prob(model, salt, tokens) / np_penalty(len(tokens), alpha)
      hypotheses.append((score, tokens))
  hypotheses.sort(key=lambda h: -h[0])
  return hypotheses


def run_beam(model, salts, beam, alpha, max_lengths, decode_length):
  return beam_search(model, tf.zeros([len(salts)], tf.int32), model.initial_state(salts),
                     beam, alpha, tf.constant(max_lengths, tf.int32), decode_length)


def run_greedy(model, salts, max_lengths, decode_length):
  return greedy_search(model, tf.zeros([len(salts)], tf.int32), model.initial_state(salts),
                       tf.constant(max_lengths, tf.int32), decode_length)


def padded(tokens, width):
  return list(tokens) + [0] * (width - len(tokens))


def as_numpy(result):
  return SearchResult(*(np.asarray(x) for x in result))


# 1. Hand-computed case ------------------------------------------------------

# Tokens: PAD 0, EOS 1, A 2, B 3. Beam 2, max length 2 (then EOS is forced).
HAND_DISTRIBUTIONS = {  # prefix -> P(PAD), P(EOS), P(A), P(B)
    (): (0.05, 0.30, 0.40, 0.25),
    (A,): (0.10, 0.35, 0.15, 0.40),
    (B,): (0.05, 0.10, 0.80, 0.05),
    (B, A): (0.02, 0.90, 0.04, 0.04),
    (A, B): (0.20, 0.50, 0.20, 0.10),
    # (A, A) and (B, B) are uniform: P(EOS) = 0.25.
}
# Step 0 from <s>: top 4 = A .40, EOS .30, B .25, PAD .05.
#   alive = [A (.40), B (.25)]; finished = [EOS (.30)].
# Step 1: extensions A A .06, A EOS .14, A B .16, A PAD .04,
#   B A .20, B EOS .025, B B .0125, B PAD .0125; top 4 = BA .20, AB .16, AE .14, AA .06.
#   alive = [B A (parent beam 1), A B (parent beam 0)]: the state must be swapped.
#   finished = [EOS .30, A EOS .14].
#   Not done: the alive B A (.20) can still beat A EOS (.14) for any alpha >= 0.
# Step 2: length 2 reached, only EOS: B A EOS = .20 * .90 = .18, A B EOS = .16 * .5 = .08.
#   (Without reordering B A would read the state of A and get P(EOS|A A) = .25.)
#   finished = best 2 of {EOS .30, B A EOS .18, A EOS .14, A B EOS .08}.
# alpha = 0: EOS (log .30), B A EOS (log .18).
# alpha = 1: EOS log .30 / 1 = -1.204, B A EOS log .18 / (8/6) = -1.286,
#   A EOS log .14 / (7/6) = -1.685, A B EOS log .08 / (8/6) = -1.894: the same two.
# No alive hypotheses are left after step 2, so steps = 3.


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_hand_computed_beams(alpha):
  decode_length = 4  # Wider than max_lengths: the buffer is padded with 0.
  model = PrefixModel(4, decode_length, HAND_DISTRIBUTIONS)
  result = as_numpy(beam_search(model, tf.zeros([1], tf.int32), model.initial_state(1),
                                2, alpha, tf.constant([2]), decode_length))
  np.testing.assert_array_equal(result.ids, [[padded([EOS], 5), padded([B, A, EOS], 5)]])
  np.testing.assert_array_equal(result.lengths, [[1, 3]])
  expected = [np.log(0.30) / np_penalty(1, alpha),
              np.log(0.25 * 0.80 * 0.90) / np_penalty(3, alpha)]
  np.testing.assert_allclose(result.scores, [expected], rtol=1e-5)
  assert result.steps == 3


# 2. Exhaustive beam == brute force ------------------------------------------

@pytest.mark.parametrize("seed,vocab,max_length,alpha", [
    (0, 4, 3, 0.0), (1, 4, 3, 0.6), (2, 5, 3, 1.0), (3, 4, 4, 0.6), (4, 5, 2, 0.2)])
def test_exhaustive_beam_matches_brute_force(seed, vocab, max_length, alpha):
  # A beam of (vocab - 1) ** max_length holds every alive prefix, so beam search
  # (with early stopping) must return exactly the brute-force top `beam`.
  beam = (vocab - 1) ** max_length
  decode_length = max_length + 1
  model = random_hash_model(seed, vocab, decode_length)
  salts, max_lengths = [5, 60], [max_length, max_length - 1]
  result = as_numpy(run_beam(model, salts, beam, alpha, max_lengths, decode_length))
  for b, (salt, max_len) in enumerate(zip(salts, max_lengths)):
    truth = brute_force(model, salt, max_len, alpha)[:beam]
    n = len(truth)
    np.testing.assert_array_equal(result.ids[b, :n],
                                  [padded(t, decode_length + 1) for _, t in truth])
    np.testing.assert_array_equal(result.lengths[b, :n], [len(t) for _, t in truth])
    np.testing.assert_allclose(result.scores[b, :n], [s for s, _ in truth], rtol=1e-5, atol=1e-5)
    # Fewer sequences exist than beams: the remaining slots are empty.
    np.testing.assert_array_equal(result.lengths[b, n:], 0)
    np.testing.assert_array_equal(result.ids[b, n:], 0)
    np.testing.assert_array_equal(result.scores[b, n:], NEG_INF)


# 3. The length penalty matters ----------------------------------------------

ALPHA_DISTRIBUTIONS = {
    (): (0.02, 0.40, 0.55, 0.03),
    (A,): (0.02, 0.05, 0.90, 0.03),
    (A, A): (0.10, 0.70, 0.10, 0.10),
}
# P(EOS) = .40 > P(A A EOS) = .55 * .9 * .7 = .3465, but
# log .3465 / lp(3) beats log .40 / lp(1) once alpha >= ~0.5.


@pytest.mark.parametrize("alpha,expected_tokens", [
    (0.0, (EOS,)), (0.6, (A, A, EOS)), (1.0, (A, A, EOS))])
def test_alpha_changes_preferred_length(alpha, expected_tokens):
  model = PrefixModel(4, 3, ALPHA_DISTRIBUTIONS)
  result = as_numpy(beam_search(model, tf.zeros([1], tf.int32), model.initial_state(1),
                                2, alpha, tf.constant([3]), 3))
  short = np.log(0.40) / np_penalty(1, alpha)
  long = np.log(0.55 * 0.90 * 0.70) / np_penalty(3, alpha)
  assert (short > long) == (expected_tokens == (EOS,))
  np.testing.assert_array_equal(result.ids[0, 0], padded(expected_tokens, 4))
  np.testing.assert_allclose(result.scores[0, :2], sorted([short, long], reverse=True), rtol=1e-5)


# 4. Early stopping ----------------------------------------------------------

def test_early_stop_when_eos_is_likely():
  decode_length = 20
  model = random_hash_model(7, 5, decode_length, eos_shift=12.0)
  salts = [3, 50]
  result = as_numpy(run_beam(model, salts, 3, 0.0, [20, 20], decode_length))
  # Step 0 finishes <EOS>; step 1 finishes "x EOS" for every alive x, filling
  # the 3 finished slots, while every alive prefix already has two unlikely
  # (~e^-12) tokens: nothing can catch up, so the search stops after 2 steps.
  assert result.steps == 2
  for b, salt in enumerate(salts):
    first = np_log_softmax(model.np_logits(salt, (0,)))
    runner_ups = [t for t in np.argsort(-first) if t != EOS][:2]
    np.testing.assert_array_equal(
        result.ids[b], [padded(t, 21) for t in [(EOS,)] + [(x, EOS) for x in runner_ups]])
  # With a length penalty the alive ones keep a chance a little longer.
  penalized = as_numpy(run_beam(model, salts, 3, 0.6, [20, 20], decode_length))
  assert 2 <= penalized.steps <= 4


def test_no_early_stop_when_eos_is_unlikely():
  decode_length = 8
  model = random_hash_model(8, 8, decode_length, eos_shift=-30.0)  # See the test below.
  result = as_numpy(run_beam(model, [3, 50], 3, 0.6, [8, 8], decode_length))
  assert result.steps == decode_length + 1
  np.testing.assert_array_equal(result.lengths, 9)


# 5. Per-sentence max lengths ------------------------------------------------

def test_eos_forced_at_each_sentence_max_length():
  # EOS is never wanted, and with vocab 8 > 2 * beam it never even enters the
  # top 2 * beam extensions (a beam search keeps such a candidate while fewer
  # than `beam` finished hypotheses exist), so only the forced EOS ends a beam.
  decode_length = 6
  max_lengths = [2, 5]
  model = random_hash_model(9, 8, decode_length, eos_shift=-30.0)
  for result in [as_numpy(run_beam(model, [3, 50], 3, 0.6, max_lengths, decode_length)),
                 as_numpy(run_greedy(model, [3, 50], max_lengths, decode_length))]:
    for b, max_len in enumerate(max_lengths):
      np.testing.assert_array_equal(result.lengths[b], max_len + 1)
      np.testing.assert_array_equal(result.ids[b, :, max_len], EOS)
      assert (result.ids[b, :, :max_len] != EOS).all()
      np.testing.assert_array_equal(result.ids[b, :, max_len + 1:], 0)
    assert result.steps == max(max_lengths) + 1


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_max_lengths_honoured_and_scores_consistent(seed):
  decode_length = 7
  max_lengths = [2, 5, 0]
  salts = [3, 50, 77]
  alpha = 0.6
  model = random_hash_model(seed, 5, decode_length, eos_shift=-1.0)
  result = as_numpy(run_beam(model, salts, 4, alpha, max_lengths, decode_length))
  for b, (salt, max_len) in enumerate(zip(salts, max_lengths)):
    assert (np.diff(result.scores[b]) <= 1e-6).all()  # Sorted best first.
    # Only sum(4 ** n, n <= max_len) distinct sequences exist (1 for max_len 0).
    found = min(4, sum(4 ** n for n in range(max_len + 1)))
    np.testing.assert_array_equal(result.lengths[b, found:], 0)
    for k in range(found):
      length = result.lengths[b, k]
      assert 1 <= length <= max_len + 1
      tokens = result.ids[b, k]
      assert tokens[length - 1] == EOS
      assert (tokens[:length - 1] != EOS).all()
      assert (tokens[length:] == 0).all()
      # The reported score is the model's own log P(Y) / lp(|Y|).
      expected = np_sequence_log_prob(model, salt, tokens[:length]) / np_penalty(length, alpha)
      np.testing.assert_allclose(result.scores[b, k], expected, rtol=1e-5, atol=1e-5)
    assert len({tuple(t) for t in result.ids[b, :found]}) == found  # Distinct beams.


# 6. Beam 1 versus greedy ----------------------------------------------------

def eos_never_runner_up_model(seed, vocab, decode_length):
  """Random model in which EOS is, for every prefix, either the most or the least likely."""
  rng = np.random.default_rng(seed)
  table = rng.normal(size=[HashModel.P, vocab]) * 1.5
  others = np.delete(table, EOS, axis=1)
  eos_first = rng.random(HashModel.P) < 0.3
  table[:, EOS] = np.where(eos_first, others.max(1) + 1.0, others.min(1) - 1.0)
  return HashModel(table, decode_length)


def np_greedy(model, salt, max_length):
  """Reference greedy decode: (tokens, log-prob)."""
  tokens, total = (), 0.0
  while True:
    log_probs = np_log_softmax(model.np_logits(salt, (0,) + tokens))
    token = EOS if len(tokens) == max_length else int(np.argmax(log_probs))
    tokens += (token,)
    total += log_probs[token]
    if token == EOS:
      return tokens, total


def np_beam1(model, salt, max_length):
  """Reference beam search with beam 1 and alpha 0, written out directly.

  The single alive prefix is extended by its best non-EOS token; an EOS among
  the top 2 extensions is a finished candidate; the best finished one wins.
  """
  prefix, log_prob, best = (), 0.0, None
  for step in range(max_length + 1):
    log_probs = np_log_softmax(model.np_logits(salt, (0,) + prefix))
    top = [EOS] if step == max_length else list(np.argsort(-log_probs)[:2])
    if EOS in top and (best is None or log_prob + log_probs[EOS] > best[1]):
      best = (prefix + (EOS,), log_prob + log_probs[EOS])
    content = [t for t in top if t != EOS]
    if not content:
      return best
    prefix, log_prob = prefix + (int(content[0]),), log_prob + log_probs[content[0]]


@pytest.mark.parametrize("seed", [20, 21, 22, 23])
def test_beam1_equals_greedy_when_eos_is_never_runner_up(seed):
  decode_length = 8
  salts = list(range(0, 90, 9))
  max_lengths = [8, 3, 5, 8, 1, 0, 7, 8, 6, 4]
  model = eos_never_runner_up_model(seed, 5, decode_length)
  beam = as_numpy(run_beam(model, salts, 1, 0.0, max_lengths, decode_length))
  greedy = as_numpy(run_greedy(model, salts, max_lengths, decode_length))
  np.testing.assert_array_equal(beam.ids, greedy.ids)
  np.testing.assert_array_equal(beam.lengths, greedy.lengths)
  np.testing.assert_allclose(beam.scores, greedy.scores, rtol=1e-5, atol=1e-5)
  assert beam.steps == greedy.steps
  for b, (salt, max_len) in enumerate(zip(salts, max_lengths)):
    tokens, log_prob = np_greedy(model, salt, max_len)
    np.testing.assert_array_equal(greedy.ids[b, 0], padded(tokens, decode_length + 1))
    np.testing.assert_allclose(greedy.scores[b, 0], log_prob, rtol=1e-5, atol=1e-5)


def test_beam1_on_general_models_differs_from_greedy_only_by_an_earlier_eos():
  # On general models beam 1 is NOT greedy: when EOS is the runner-up it is kept
  # as a finished hypothesis while the beam follows the best non-EOS token, and
  # it wins if the greedy continuation ends up less likely.
  decode_length = 6
  salts = list(range(0, 96, 3))
  max_lengths = [6] * len(salts)
  same = differ = 0
  for seed in [30, 31]:
    model = random_hash_model(seed, 4, decode_length, eos_shift=0.5)
    beam = as_numpy(run_beam(model, salts, 1, 0.0, max_lengths, decode_length))
    greedy = as_numpy(run_greedy(model, salts, max_lengths, decode_length))
    for b, salt in enumerate(salts):
      greedy_tokens, greedy_log_prob = np_greedy(model, salt, 6)
      np.testing.assert_array_equal(greedy.ids[b, 0], padded(greedy_tokens, 7))
      beam_tokens, beam_log_prob = np_beam1(model, salt, 6)
      np.testing.assert_array_equal(beam.ids[b, 0], padded(beam_tokens, 7))
      np.testing.assert_allclose(beam.scores[b, 0], beam_log_prob, rtol=1e-5, atol=1e-5)
      if beam_tokens == greedy_tokens:
        same += 1
      else:
        differ += 1
        n = len(beam_tokens) - 1
        assert n < len(greedy_tokens) - 1 and beam_tokens[:n] == greedy_tokens[:n]
        assert beam_log_prob > greedy_log_prob
  assert same > 0 and differ > 0  # Both behaviours occur with these seeds.


# 7. XLA ---------------------------------------------------------------------

def test_xla_compiled_matches_eager():
  decode_length = 7
  model = random_hash_model(40, 6, decode_length)
  salts, max_lengths = [3, 50, 81], [7, 4, 6]

  def decode():
    return (run_beam(model, salts, 3, 0.6, max_lengths, decode_length),
            run_greedy(model, salts, max_lengths, decode_length))

  eager = decode()
  compiled = tf.function(decode, jit_compile=True)()
  for e, c in zip(eager, compiled):
    e, c = as_numpy(e), as_numpy(c)
    np.testing.assert_array_equal(e.ids, c.ids)
    np.testing.assert_array_equal(e.lengths, c.lengths)
    np.testing.assert_allclose(e.scores, c.scores, rtol=1e-5, atol=1e-5)
    assert e.steps == c.steps


# 8. Batch independence ------------------------------------------------------

@pytest.mark.parametrize("seed", [50, 51])
def test_sentences_decode_independently_of_the_batch(seed):
  decode_length = 6
  model = random_hash_model(seed, 5, decode_length)
  salts, max_lengths = [3, 11, 40, 64], [4, 2, 6, 5]
  batched = as_numpy(run_beam(model, salts, 3, 0.6, max_lengths, decode_length))
  for b, (salt, max_len) in enumerate(zip(salts, max_lengths)):
    alone = as_numpy(run_beam(model, [salt], 3, 0.6, [max_len], decode_length))
    np.testing.assert_array_equal(batched.ids[b], alone.ids[0])
    np.testing.assert_array_equal(batched.lengths[b], alone.lengths[0])
    np.testing.assert_allclose(batched.scores[b], alone.scores[0], rtol=1e-6)
    assert alone.steps <= batched.steps


# 8b. Several alphas in one search --------------------------------------------

ALPHAS = [0.0, 0.6, 1.0, 1.6, 2.4]


@pytest.mark.parametrize("seed,eos_shift,compiled", [(60, 0.0, False), (61, 1.0, False),
                                                     (62, -1.0, False), (63, 0.0, True)])
def test_several_alphas_in_one_search_give_each_alpha_s_own_beams(seed, eos_shift, compiled):
  """One search with a finished set per alpha returns, alpha by alpha, exactly what a search
  with that alpha alone returns: the same beams, lengths and scores (early stopping and the
  forced EOS included: likely, unlikely and even EOS)."""
  decode_length = 7
  model = random_hash_model(seed, 6, decode_length, eos_shift=eos_shift)
  salts, max_lengths = [3, 50, 81, 17], [7, 4, 6, 2]

  def decode(alpha):
    return run_beam(model, salts, 3, alpha, max_lengths, decode_length)
  if compiled:
    decode = tf.function(decode, jit_compile=True)
  together = as_numpy(decode(ALPHAS))
  assert together.ids.shape == (len(salts), len(ALPHAS), 3, decode_length + 1)
  steps = []
  for a, alpha in enumerate(ALPHAS):
    alone = as_numpy(decode(alpha))
    np.testing.assert_array_equal(together.ids[:, a], alone.ids, err_msg=f"alpha {alpha}")
    np.testing.assert_array_equal(together.lengths[:, a], alone.lengths)
    np.testing.assert_allclose(together.scores[:, a], alone.scores, rtol=1e-6)
    steps.append(int(alone.steps))
  assert together.steps == max(steps)  # Done once done for every alpha.
  # The alphas disagree somewhere, so the sets really are kept apart.
  assert any(not np.array_equal(together.ids[:, 0], together.ids[:, a])
             for a in range(1, len(ALPHAS)))


def test_several_alphas_best_hypothesis_is_the_brute_force_best_for_each():
  """Exhaustive beam (beam >= every live prefix), several alphas at once: each alpha's top
  hypothesis is the brute-force argmax of log P / lp under that alpha."""
  vocab, max_length = 4, 3
  model = random_hash_model(70, vocab, max_length, eos_shift=0.5)
  beam = (vocab - 1) ** max_length  # Every content prefix of the longest length fits.
  result = as_numpy(run_beam(model, [9], beam, ALPHAS, [max_length], max_length))
  for a, alpha in enumerate(ALPHAS):
    score, tokens = brute_force(model, 9, max_length, alpha)[0]
    assert result.ids[0, a, 0].tolist() == padded(tokens, max_length + 1), alpha
    assert result.scores[0, a, 0] == pytest.approx(score, rel=1e-5)


# 9. Tiling and the length penalty ---------------------------------------------

def test_tile_to_beams_matches_numpy_repeat():
  x = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
  y = np.arange(3, dtype=np.int32) * 10
  tiled = tile_to_beams({"x": tf.constant(x), "nested": {"y": tf.constant(y)}}, 5)
  np.testing.assert_array_equal(tiled["x"], np.repeat(x, 5, axis=0))
  np.testing.assert_array_equal(tiled["nested"]["y"], np.repeat(y, 5, axis=0))
  assert tiled["x"].shape == (15, 2, 4)


def test_length_penalty_formula():
  lengths = np.array([1, 2, 7, 30])
  for alpha in [0.0, 0.6, 1.0]:
    np.testing.assert_allclose(length_penalty(tf.constant(lengths), alpha),
                               ((5.0 + lengths) / 6.0) ** alpha, rtol=1e-6)


@pytest.mark.parametrize("width,k,quantum,invalid", [
    (32000, 8, 0.0, 0.0), (32000, 8, 0.25, 0.0), (4096 + 7, 8, 0.5, 0.3), (8000, 4, 0.0, 0.999)])
def test_blocked_top_k_equals_tf_top_k_ties_included(width, k, quantum, invalid):
  """The two-stage top-k used for wide rows returns exactly tf.math.top_k's indices.

  Rounded scores make many exact ties (top_k breaks them by lower index);
  invalid entries sort last whatever their score.
  """
  from t2tlite.decoding import search as search_lib
  rng = np.random.default_rng(width + k)
  scores = rng.normal(size=(6, width)).astype(np.float32)
  if quantum:
    scores = np.round(scores / quantum) * quantum
  valid = rng.random((6, width)) >= invalid
  keys = np.where(valid, scores, -np.inf)
  expected = tf.math.top_k(tf.constant(keys), k=k).indices.numpy()
  compiled = tf.function(search_lib._top_k_indices, jit_compile=True)
  for fn in (search_lib._top_k_indices, compiled):
    got = fn(tf.constant(scores), tf.constant(valid), k).numpy()
    np.testing.assert_array_equal(got, expected)
  assert width >= 4 * k * search_lib._TOP_K_BLOCK  # The blocked path is the one tested.
