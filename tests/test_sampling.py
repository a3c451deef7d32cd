"""Sampling (sampling_method=random): limits equal argmax, draws follow the model, seeds reproduce.

The frequency tests compare many draws of a toy Markov model, whose exact
distribution over whole outputs is computed here in numpy, with a chi-square
test at p = 1e-4 (critical value from the Wilson-Hilferty approximation, no
scipy), and check that the same test rejects a wrong distribution (its power).
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2tlite.decoding import sampling
from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.decoding.decoder import Decoder
from t2tlite.decoding.search import greedy_search
from t2tlite.models.transformer import Transformer
from t2tlite.overrides import OverrideError
from tests.helpers import tiny_hparams

EOS = 1


def np_log_softmax(logits):
  shifted = np.asarray(logits, np.float64) - np.max(logits)
  return shifted - np.log(np.exp(shifted).sum())


def np_sampling_distribution(logits, temperature, top_k):
  """What one draw should follow: softmax(log_softmax(logits) / T) over the top k."""
  scaled = np_log_softmax(logits) / temperature
  if top_k:
    scaled = np.where(scaled >= np.sort(scaled)[-top_k], scaled, -np.inf)
  probs = np.exp(scaled - scaled.max())
  return probs / probs.sum()


def chi_square_critical(dof, z=3.719):
  """Upper 1e-4 quantile of chi-square(dof) (Wilson-Hilferty; z is the normal's 1e-4 quantile)."""
  return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


class MarkovModel:
  """Next-token logits = table[previous token]; position 0 holds the start symbol 0."""

  def __init__(self, table):
    self.table_np = np.asarray(table, np.float32)
    self.table = tf.constant(self.table_np)

  def __call__(self, ids, step, state):
    return tf.gather(self.table, ids), state

  def outcome_probs(self, temperature, top_k):
    """{tokens: probability} of every output of at most 2 tokens (then EOS is forced)."""
    first = np_sampling_distribution(self.table_np[0], temperature, top_k)
    probs = {}
    for a, pa in enumerate(first):
      if a == EOS:
        probs[(a,)] = pa
        continue
      second = np_sampling_distribution(self.table_np[a], temperature, top_k)
      for b, pb in enumerate(second):
        probs[(a, b)] = pa * pb
    return probs


MARKOV = MarkovModel([[0.2, -0.5, 1.0, 0.1, -1.0],   # After the start symbol (and pad).
                      [0.0, 0.0, 0.0, 0.0, 0.0],     # After EOS: never used.
                      [-1.0, 0.3, -0.2, 1.2, 0.5],
                      [0.5, -0.3, 0.9, -0.7, 0.0],
                      [-0.4, 1.1, 0.2, 0.6, -0.2]])


def sample_outcomes(model, rows, temperature, top_k, max_length=2):
  keys = sampling.mix(tf.cast(tf.range(rows), tf.uint32) + 12345)
  result = greedy_search(model, tf.zeros([rows], tf.int32), (),
                         tf.fill([rows], max_length), max_length, EOS,
                         choose=sampling.Sampler(temperature, top_k, keys))
  counts = {}
  for ids in result.ids.numpy()[:, 0]:
    # (EOS,), or the first two tokens: (a, EOS), or (a, b) followed by the forced EOS.
    outcome = (EOS,) if ids[0] == EOS else (int(ids[0]), int(ids[1]))
    counts[outcome] = counts.get(outcome, 0) + 1
  return counts, result


def chi_square(counts, probs, rows):
  """Statistic over the outcomes with positive probability; outcomes of probability 0 never drawn."""
  impossible = {o: n for o, n in counts.items() if probs.get(o, 0.0) == 0.0}
  assert not impossible, impossible
  cells = [o for o, p in probs.items() if p > 0]
  statistic = sum((counts.get(o, 0) - rows * probs[o]) ** 2 / (rows * probs[o]) for o in cells)
  return statistic, len(cells) - 1


@pytest.mark.parametrize("temperature,top_k", [(1.0, 0), (0.5, 0), (2.0, 3)])
def test_draws_follow_the_tempered_top_k_softmax(temperature, top_k):
  rows = 20000
  counts, _ = sample_outcomes(MARKOV, rows, temperature, top_k)
  probs = MARKOV.outcome_probs(temperature, top_k)
  statistic, dof = chi_square(counts, probs, rows)
  assert statistic < chi_square_critical(dof), (statistic, dof)
  # The test has power: the same draws reject a neighbouring distribution.
  wrong = MARKOV.outcome_probs(temperature * 1.3, 0)
  cells = [o for o, p in wrong.items() if p > 0]
  wrong_statistic = sum((counts.get(o, 0) - rows * wrong[o]) ** 2 / (rows * wrong[o])
                        for o in cells)
  assert wrong_statistic > 3 * chi_square_critical(len(cells) - 1)


def test_scores_are_the_models_log_probs_of_the_drawn_tokens():
  _, result = sample_outcomes(MARKOV, 64, 0.7, 0)
  for ids, score in zip(result.ids.numpy()[:, 0], result.scores.numpy()[:, 0]):
    previous, total = 0, 0.0
    for token in ids:
      total += np_log_softmax(MARKOV.table_np[previous])[token]
      if token == EOS:
        break
      previous = token
    assert score == pytest.approx(total, abs=1e-4)


def salted_model(seed, vocab=12, salts=97):
  """Logits = table[(salt, previous token, step) hashed]: different per row and step."""
  table = tf.constant(np.random.default_rng(seed).normal(size=[salts, vocab]) * 1.5, tf.float32)

  def model(ids, step, state):
    index = (state * 31 + ids * 7 + step * 13) % salts
    return tf.gather(table, index), state
  return model


def run(model, rows, choose=None, max_length=8):
  extra = {"choose": choose} if choose is not None else {}
  salts = tf.range(rows)
  return greedy_search(model, tf.zeros([rows], tf.int32), salts, tf.fill([rows], max_length),
                       max_length, EOS, **extra).ids.numpy()


@pytest.mark.parametrize("temperature,top_k", [(1e-4, 0), (1.0, 1), (3.0, 1)])
def test_zero_temperature_and_top_1_equal_argmax(temperature, top_k):
  model, rows = salted_model(0), 64
  keys = sampling.mix(tf.cast(tf.range(rows), tf.uint32))
  greedy = run(model, rows)
  np.testing.assert_array_equal(run(model, rows, sampling.Sampler(temperature, top_k, keys)),
                                greedy)
  # Not vacuous: at temperature 1 over every token the draws leave the argmax path.
  assert (run(model, rows, sampling.Sampler(1.0, 0, keys)) != greedy).any()


def test_source_keys_ignore_padding_and_depend_on_ids_and_seed():
  inputs = tf.constant([[5, 6, 1, 0, 0, 0], [5, 6, 1, 0, 0, 0], [6, 5, 1, 0, 0, 0]])
  narrow = tf.constant([[5, 6, 1, 0], [5, 6, 1, 0], [6, 5, 1, 0]])
  lengths = tf.constant([2, 2, 2])
  keys = sampling.source_keys(inputs, lengths, 1).numpy()
  np.testing.assert_array_equal(keys, sampling.source_keys(narrow, lengths, 1).numpy())
  assert keys[0] == keys[1] and keys[0] != keys[2]
  assert sampling.source_keys(inputs, lengths, 2).numpy()[0] != keys[0]


@pytest.fixture(scope="module")
def model():
  keras.utils.set_random_seed(3)  # One layer each side: each Decoder below traces its search.
  return Transformer(tiny_hparams(xla=False, num_encoder_layers=1, num_decoder_layers=1))


# Lengths <= 7: one padded width (8), so each Decoder traces its search once.
SOURCES = [[int(t) for t in np.random.RandomState(1).randint(2, 20, size=n)]
           for n in (6, 2, 7, 5, 1, 4, 3, 7)]


def decoder(model, overrides):
  hp = DecodeHParams(beam_size=1, extra_length=5, batch_size=8).override(overrides)
  return Decoder(model, hp)


def sampled(model, overrides):
  return decoder(model, "sampling_method=random," + overrides).decode_ids(SOURCES)


@pytest.fixture(scope="module")
def seed_seven(model):
  """The Decoder sampling with seed 7, and its draws for SOURCES."""
  seven = decoder(model, "sampling_method=random,sampling_seed=7")
  return seven, seven.decode_ids(SOURCES)


def test_same_seed_same_samples_whatever_the_batching_other_seed_differs(model, seed_seven):
  seven, first = seed_seven
  assert seven.decode_ids(SOURCES[::-1]) == first[::-1]  # Other rows, the same draws.
  assert sampled(model, "sampling_seed=7,batch_size=1") == first  # One sentence per batch.
  assert sampled(model, "sampling_seed=8") != first


def test_decoder_temperature_to_zero_and_top_1_equal_greedy(model, seed_seven):
  greedy = decoder(model, "").decode_ids(SOURCES)
  assert sampled(model, "sampling_temp=1e-6") == greedy
  assert sampled(model, "sampling_topk=1") == greedy
  assert seed_seven[1] != greedy  # Not vacuous: at temperature 1 the draws leave the argmax.


def test_sampling_options_are_checked():
  hp = DecodeHParams()
  with pytest.raises(OverrideError, match="sampling_method=random draws one hypothesis per "
                     "sentence; add beam_size=1 \\(got beam_size=4\\)"):
    hp.override("sampling_method=random")
  with pytest.raises(OverrideError, match="sampling_method='top' must be one of argmax, random"):
    hp.override("sampling_method=top,beam_size=1")
  with pytest.raises(OverrideError, match="must be >= 0"):
    hp.override("sampling_method=random,beam_size=1,sampling_temp=-1")
  assert hp.override("sampling_method=random,beam_size=1").samples
  # Temperature 0 is the argmax (tensor2tensor's convention): the greedy search, no draws.
  assert not hp.override("sampling_method=random,beam_size=1,sampling_temp=0").samples


class _NoTokenThree:
  """A token constraint (search.py's API) that never allows token 3."""

  def mask(self, state):
    return tf.not_equal(tf.range(5), 3)[tf.newaxis] & tf.ones_like(state, tf.bool)[:, tf.newaxis]

  def update(self, state, tokens):
    return state


def test_draws_respect_a_token_constraint_and_renormalise_over_the_rest():
  rows = 20000
  keys = sampling.mix(tf.cast(tf.range(rows), tf.uint32) + 999)
  result = greedy_search(MARKOV, tf.zeros([rows], tf.int32), (), tf.fill([rows], 1), 1, EOS,
                         constraint=_NoTokenThree(), constraint_state=tf.zeros([rows], tf.int32),
                         choose=sampling.Sampler(1.0, 0, keys))
  first = result.ids.numpy()[:, 0, 0]
  assert not np.any(first == 3)
  # Drawn from the softmax over the allowed tokens: the model's probabilities, renormalised.
  probs = np.exp(np_log_softmax(MARKOV.table_np[0]))
  probs[3] = 0.0
  probs /= probs.sum()
  counts = {(t,): int(np.sum(first == t)) for t in range(5) if np.any(first == t)}
  statistic, dof = chi_square(counts, {(t,): p for t, p in enumerate(probs)}, rows)
  assert statistic < chi_square_critical(dof), statistic
