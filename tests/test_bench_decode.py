"""bench/decode_speed.py's real-text workload beside Model Garden: what makes the comparison fair.

Model Garden decodes with eos_id=-1, so every sentence runs to its maximum length. Ours gets a
token constraint that forbids EOS until the search forces it; these tests check, on a random
model, that every sentence then decodes to exactly its source length + extra_length whatever the
model prefers, and that the batches handed to Model Garden are the ones t2t-decoder forms.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2tlite.constants import EOS_ID
from t2tlite.decoding import search
from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.decoding.decoder import Decoder, length_batches
from t2tlite.models.transformer import Transformer
from tests.helpers import load_script, tiny_hparams


def _eos_first_logits(vocab):
  """A step function that ranks EOS first at every step, then the other tokens by id."""
  def step(ids, step, state):
    del step
    logits = -tf.cast(tf.range(vocab), tf.float32)[tf.newaxis] * 0.1
    logits = tf.tensor_scatter_nd_update(logits, [[0, EOS_ID]], [5.0])
    return tf.tile(logits, [tf.shape(ids)[0], 1]), state
  return step


@pytest.mark.parametrize("beam_size", [1, 4])
def test_no_early_eos_decodes_every_sentence_to_its_maximum_length(beam_size):
  bench = load_script("bench/decode_speed.py")
  vocab, max_lengths = 12, tf.constant([0, 3, 7, 1], tf.int32)
  constraint = bench._NoEarlyEos(vocab, EOS_ID)
  start = tf.zeros([4], tf.int32)
  args = dict(max_lengths=max_lengths, decode_length=9, eos_id=EOS_ID)
  state = dict(constraint=constraint, constraint_state=constraint.initial_state(None, max_lengths))
  if beam_size == 1:
    free = search.greedy_search(_eos_first_logits(vocab), start, {}, **args)
    fixed = search.greedy_search(_eos_first_logits(vocab), start, {}, **state, **args)
  else:
    free = search.beam_search(_eos_first_logits(vocab), start, {}, beam_size, 0.6, **args)
    fixed = search.beam_search(_eos_first_logits(vocab), start, {}, beam_size, 0.6, **state,
                               **args)
  # Lengths count the EOS. Left alone, the search ends every sentence at once.
  assert free.lengths.numpy()[:, 0].tolist() == [1, 1, 1, 1]
  assert fixed.lengths.numpy()[:, 0].tolist() == (max_lengths.numpy() + 1).tolist()
  for row, n in enumerate(max_lengths.numpy()):
    tokens = fixed.ids.numpy()[row, 0].tolist()
    assert EOS_ID not in tokens[:n] and tokens[n] == EOS_ID, tokens


@pytest.fixture(scope="module")
def random_model():
  keras.utils.set_random_seed(5)
  return Transformer(tiny_hparams(xla=False))


def test_length_batches_are_the_decoders_batches(random_model):
  rng = np.random.default_rng(1)
  lengths = rng.integers(0, 60, 300).tolist()
  hp = DecodeHParams()  # The default batching the benchmark hands to Model Garden.
  groups = length_batches(lengths, hp)
  assert groups == Decoder(random_model, hp).batches(lengths)
  assert sorted(i for g in groups for i in g) == [i for i, n in enumerate(lengths) if n]
  for g in groups:
    width = -(-(max(lengths[i] for i in g) + 1) // hp.length_multiple) * hp.length_multiple
    assert len(g) <= hp.batch_size and (len(g) == 1 or len(g) * width <= hp.batch_tokens)


def test_counts_match_sentences_when_batches_are_searched_concurrently(random_model):
  """time_decoding maps each searched row back to its source by its ids, so its token counts
  hold whatever order concurrent batches finish in: with EOS forbidden until the maximum,
  every sentence generates exactly its source length + extra_length tokens."""
  bench = load_script("bench/decode_speed.py")
  rng = np.random.default_rng(2)
  vocab = random_model.hparams.target_vocab_size
  sources = [rng.integers(3, vocab, n).tolist() for n in rng.integers(1, 20, 40)]
  hp = DecodeHParams(beam_size=2, extra_length=3, batch_size=8, concurrent_batches=3)
  decoder = Decoder(random_model, hp, constraint=bench._NoEarlyEos(vocab, EOS_ID))
  recorder = bench._RecordingSearch(decoder.search_ids, hp.extra_length)
  decoder.search_ids = recorder
  res = bench.time_decoding(decoder, recorder, sources, 1, "test")
  assert res["generated_tokens"] == sum(len(s) + 3 for s in sources)
  assert res["ended_early"] == 0 and res["concurrent_batches"] == 3
  assert len(res["batches"]) == len(decoder.batches([len(s) for s in sources])) == 5
  assert res["loop_steps"] == sum(decoder.last_steps)
