"""Batched file decoding: input order, batch independence, length limits, empty lines."""

import os
import threading

import keras
import numpy as np
import pytest

from t2tlite.decoding import batching, search
from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.decoding.decoder import Decoder
from t2tlite.decoding.pipeline import DecodePipeline, decode_lines
from t2tlite.models.transformer import Transformer
from t2tlite.overrides import OverrideError
from tests.helpers import tiny_hparams


@pytest.fixture(scope="module")
def model():
  keras.utils.set_random_seed(3)
  return Transformer(tiny_hparams(xla=False))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_outputs_come_back_in_input_order_and_match_one_by_one(model, beam_size):
  rng = np.random.RandomState(0)
  sources = [list(rng.randint(2, 20, size=n)) for n in (9, 2, 14, 5, 1, 11, 3)]
  hp = DecodeHParams(beam_size=beam_size, extra_length=4, batch_size=3)
  batched = Decoder(model, hp).decode_ids(sources)
  single = Decoder(model, hp.override("batch_size=1"))
  for source, output in zip(sources, batched):
    assert output == single.decode_ids([source])[0]
    assert len(output) <= len(source) + 4  # Maximum output length = input length + extra.


def test_empty_sources_give_empty_outputs_in_place(model):
  out = Decoder(model, DecodeHParams(beam_size=2, extra_length=3)).decode_ids([[5, 6], [], [7]])
  assert out[1] == [] and len(out) == 3


def test_decode_hparams_defaults_are_the_papers():
  hp = DecodeHParams()
  assert (hp.beam_size, hp.alpha, hp.extra_length) == (4, 0.6, 50)
  assert hp.override("beam_size=8,alpha=1.0").beam_size == 8
  with pytest.raises(OverrideError, match="--decode_hparams: unknown key 'beam'"):
    hp.override("beam=2")
  with pytest.raises(OverrideError, match="beam_size=0 must be >= 1"):
    hp.override("beam_size=0")


@pytest.fixture(scope="module")
def trained(tiny_run):
  """The session's tiny model (200 steps on algorithmic_reverse: peaked, not uniform, logits)."""
  problem = tiny_run.trainer.problem
  encoder = problem.encoders()["inputs"]
  sources = [encoder.encode(s) for s, _ in problem.text_pairs("test")][:24]
  return tiny_run.trainer.model, sources


@pytest.mark.parametrize("beam_size", [1, 4])
def test_attending_within_horizons_equals_the_whole_cache_and_recomputation(trained, beam_size):
  """A cached step that attends within doubling horizons (first horizon 2: 2, 4, 8, ..., L)
  decodes exactly as the default cached decoder, which reads the whole cache at every step
  at these lengths (its first horizon, 64, is past them), and as the uncached decoder, which
  recomputes every position."""
  model, sources = trained
  hp = DecodeHParams(beam_size=beam_size, extra_length=9, nbest=beam_size, batch_size=8)
  within = Decoder(model, hp)
  within.first_horizon = 2
  whole = Decoder(model, hp)
  assert max(map(len, sources)) + hp.extra_length < whole.first_horizon
  uncached = Decoder(model, hp.override("use_cache=false"))
  results = [d.decode_nbest(sources) for d in (within, whole, uncached)]
  for per_decoder in zip(*results):
    ids = [[hyp for hyp, _ in beams] for beams in per_decoder]
    assert ids[0] == ids[1] == ids[2]
    np.testing.assert_allclose([s for _, s in per_decoder[0]], [s for _, s in per_decoder[1]],
                               atol=1e-5)
    np.testing.assert_allclose([s for _, s in per_decoder[0]], [s for _, s in per_decoder[2]],
                               atol=1e-4)
  assert max(len(beams[0][0]) for beams in results[0]) > 8  # Decoding ran past three horizons.


def _step_logits(model, length, horizons, positions=(), value=0.0, step=5):
  """Logits of one cached step at `step` over a cache of `length` positions (two rows, each
  its own history), after `value` is written into every layer's keys and values at
  `positions`."""
  import tensorflow as tf
  memory, memory_mask = model.encode(tf.constant([[5, 6, 7, 1]] * 2, tf.int32))
  state, context = model.initial_decode_state(memory, memory_mask, length)
  state["history_rows"] = tf.tile(tf.range(2)[:, None], [1, length])
  where = np.zeros([1, length, 1, 1], bool)
  where[:, list(positions)] = True
  state = {name: {k: tf.where(where, value, v) for k, v in layer.items()}
           if name.startswith("layer_") else layer for name, layer in state.items()}
  return model.decode_step(tf.constant([9, 9], tf.int32), tf.constant(step), state, context,
                           horizons)[0].numpy()


def test_a_cached_step_reads_only_the_positions_before_its_horizon(trained):
  """A step attends within the first horizon past `step`: NaN written into the cache at and
  past that horizon leaves its logits exactly as they were (a read, even masked, would turn
  them NaN: 0 * NaN), while noise before `step` changes them."""
  model, _ = trained
  length, horizons = 20, [4, 8, 20]
  clean = _step_logits(model, length, horizons)
  assert np.isfinite(clean).all()
  np.testing.assert_array_equal(_step_logits(model, length, horizons, range(8, length), np.nan),
                                clean)
  hp = model.hparams
  noise = np.random.RandomState(0).normal(size=(2, length, hp.num_heads, hp.key_dim))
  assert np.abs(_step_logits(model, length, horizons, [2], noise.astype(np.float32))
                - clean).max() > 1e-3
  # Inside the horizon, past `step`: read, masked.
  assert np.isnan(_step_logits(model, length, horizons, [7], np.nan)).all()


def test_a_horizon_that_spares_less_than_the_first_horizon_gets_no_branch(trained):
  """The step reads a short buffer whole: with horizons [4, 8, 10] over 10 positions, 8 would
  spare only 2 of them (less than the first horizon, 4), so a step at 5 reads all 10 (NaN
  at 9 turns its logits NaN); over 20 positions ([4, 8, 16, 20]) it stops at 8."""
  model, _ = trained
  assert np.isnan(_step_logits(model, 10, [4, 8, 10], range(9, 10), np.nan)).all()
  assert np.isfinite(_step_logits(model, 20, [4, 8, 16, 20], range(9, 20), np.nan)).all()


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_search_of_unknown_width_attends_within_the_horizons_and_decodes_the_same(
    trained, beam_size):
  """The exported search is traced for any batch and width (its decode length is a tensor):
  its step attends within the horizons of the widest source max_input_length allows, the
  ones past the request's own buffer reading the whole buffer; its ids and scores are those
  of the search traced for the batch's static width."""
  import tensorflow as tf
  model, sources = trained
  hp = DecodeHParams(beam_size=beam_size, extra_length=9, nbest=beam_size, batch_size=8,
                     pad_batch_rows=False)
  decoder = Decoder(model, hp)
  decoder.first_horizon = 2
  any_shape = decoder.search_ids.get_concrete_function(
      tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32))
  batch = sources[:8]
  width = -(-(max(map(len, batch)) + 1) // hp.length_multiple) * hp.length_multiple
  inputs = np.zeros([len(batch), width], np.int32)
  for row, ids in enumerate(batch):
    inputs[row, :len(ids)] = ids
    inputs[row, len(ids)] = 1  # EOS
  lengths = np.array([len(ids) for ids in batch], np.int32)
  dynamic = any_shape(tf.constant(inputs), tf.constant(lengths))
  static = decoder.search_ids(tf.constant(inputs), tf.constant(lengths))
  np.testing.assert_array_equal(dynamic.ids.numpy(), static.ids.numpy())
  np.testing.assert_allclose(dynamic.scores.numpy(), static.scores.numpy(), atol=1e-5)
  assert int(static.steps) > 8  # Past three horizons.


def test_doubling_horizons():
  assert batching.doubling_horizons(300, 64) == [64, 128, 256, 300]
  assert batching.doubling_horizons(64, 64) == [64]
  assert batching.doubling_horizons(65, 64) == [64, 65]
  assert batching.doubling_horizons(5, 2) == [2, 4, 5]


def test_nbest_beams_and_scores(trained):
  """nbest=N gives N distinct hypotheses best first; the best equals plain decoding."""
  model, sources = trained
  best = Decoder(model, DecodeHParams(extra_length=5)).decode_ids(sources)
  beams = Decoder(model, DecodeHParams(extra_length=5, return_beams=True)).decode_nbest(sources)
  for one, four in zip(best, beams):
    assert len(four) == 4 and four[0][0] == one
    scores = [score for _, score in four]
    assert scores == sorted(scores, reverse=True)
    assert len({tuple(ids) for ids, _ in four}) == 4


class _Words:
  """Ids as space-separated numbers, for checking line formats."""

  def encode(self, line):
    return [int(x) for x in line.split()]

  def decode(self, ids):
    return " ".join(str(i) for i in ids)


class _WordsProblem:
  """A problem whose text is the ids themselves, scored by exact match."""
  eval_metrics = ("exact_match",)

  def encoders(self, data_dir=None):
    return {"inputs": _Words(), "targets": _Words()}

  def decode_postprocessor(self, decode_hparams):
    return None

  def decode_constraint(self, decode_hparams, encoders):
    return None


def test_written_lines_with_beams_and_scores(trained):
  model, sources = trained
  lines = [" ".join(map(str, s)) for s in sources[:5]] + [""]
  plain = decode_lines(_WordsProblem(), model, DecodeHParams(extra_length=5), lines)
  hp = DecodeHParams(extra_length=5, nbest=2, write_beam_scores=True)
  scored = decode_lines(_WordsProblem(), model, hp, lines)
  for one, two, hyps in zip(plain.lines[:5], scored.lines[:5], scored.hypotheses):
    fields = two.split("\t")
    assert len(fields) == 4 and fields[0] == one
    assert float(fields[1]) >= float(fields[3])
    assert fields == [hyps[0].text, f"{hyps[0].score:.4f}", hyps[1].text, f"{hyps[1].score:.4f}"]
  assert plain.lines[5] == "" and scored.lines[5] == ""
  # The text path decodes exactly what the id path decodes.
  ids = Decoder(model, DecodeHParams(extra_length=5)).decode_ids(sources[:5])
  assert plain.lines[:5] == [" ".join(map(str, x)) for x in ids]


def test_pipeline_scores_the_best_hypothesis_against_references(trained):
  """exact_match over the best hypotheses, whatever else the lines hold (nbest, scores)."""
  model, sources = trained
  lines = [" ".join(map(str, s)) for s in sources[:6]]
  hp = DecodeHParams(extra_length=5, nbest=2, write_beam_scores=True)
  first = decode_lines(_WordsProblem(), model, hp, lines)
  references = [first.best[0], "no", first.best[2], "no", "no", first.best[5]]
  again = decode_lines(_WordsProblem(), model, hp, lines, references)
  assert again.best == first.best and again.metrics == {"exact_match": 0.5}
  steps = []
  DecodePipeline(_WordsProblem(), model, hp.override("batch_size=4,concurrent_batches=1")).decode(
      lines, progress=steps.append)
  assert steps == [4, 6]  # One batch at a time: progress in batch order.


def test_token_budget_batches_and_truncation(model):
  lengths = [30, 3, 0, 7, 15, 7, 2]
  decoder = Decoder(model, DecodeHParams(batch_tokens=40, batch_size=3, length_multiple=8))
  batches = decoder.batches(lengths)
  assert sorted(i for b in batches for i in b) == [0, 1, 3, 4, 5, 6]  # Empty source skipped.
  for batch in batches:
    width = -(-(max(lengths[i] for i in batch) + 1) // 8) * 8
    assert len(batch) <= 3 and (len(batch) == 1 or len(batch) * width <= 40)
  assert [lengths[b[0]] for b in batches] == sorted(lengths[b[0]] for b in batches)
  limited = Decoder(model, DecodeHParams(beam_size=1, extra_length=2, max_input_length=6))
  out = limited.decode_ids([list(range(2, 12)), [3, 4], list(range(2, 9))])
  assert limited.truncated == 2 and len(out) == 3
  assert out[0] == limited.decode_ids([list(range(2, 7))])[0]  # Cut to 5 tokens + EOS.


def test_padded_batch_rows_change_nothing_but_the_shapes(trained):
  """Filling batches with empty rows gives the same beams and scores, one shape per width."""
  model, sources = trained
  hp = DecodeHParams(beam_size=2, extra_length=3, nbest=2, batch_size=5, batch_tokens=40)
  padded = Decoder(model, hp)
  unpadded = Decoder(model, hp.override("pad_batch_rows=false"))
  with_pad, without = padded.decode_nbest(sources), unpadded.decode_nbest(sources)
  for one, two in zip(with_pad, without):
    assert [ids for ids, _ in one] == [ids for ids, _ in two]
    np.testing.assert_allclose([s for _, s in one], [s for _, s in two], atol=1e-5)
  batches = padded.batches([len(s) for s in sources])
  last_width = -(-(max(len(sources[i]) for i in batches[-1]) + 1) // hp.length_multiple
                 ) * hp.length_multiple
  last_shape = (max(len(batches[-1]), hp.rows_for_width(last_width)), last_width)
  if last_shape not in padded.shapes_seen:  # The last batch pads only onto a compiled shape.
    last_shape = (len(batches[-1]), last_width)
  earlier = padded.shapes_seen - {last_shape}
  assert len(earlier) == len({width for _, width in earlier})
  assert all(rows == hp.rows_for_width(width) for rows, width in earlier)
  assert len(unpadded.shapes_seen) > len(padded.shapes_seen)  # The fixture's lengths vary.


def test_concurrent_batches_decode_what_one_batch_at_a_time_does(trained):
  """Searching several batches at once (one thread each) changes nothing but the wall time:
  the same beams, scores, loop steps (in batch order) and compiled shapes."""
  model, sources = trained
  hp = DecodeHParams(beam_size=3, extra_length=4, nbest=3, batch_size=4, batch_tokens=0)
  serial, parallel = Decoder(model, hp), Decoder(model, hp.override("concurrent_batches=3"))
  threads = set()
  search_ids = parallel.search_ids

  def recording(*args):
    threads.add(threading.get_ident())
    return search_ids(*args)

  parallel.search_ids = recording
  one, many = serial.decode_nbest(sources), parallel.decode_nbest(sources)
  assert len(threads) > 1  # The batches really ran on several threads.
  for a, b in zip(one, many):
    assert [ids for ids, _ in a] == [ids for ids, _ in b]
    assert [score for _, score in a] == [score for _, score in b]
  assert serial.last_steps == parallel.last_steps and len(serial.last_steps) == 6
  assert serial.shapes_seen == parallel.shapes_seen
  assert Decoder(model, DecodeHParams()).concurrent_batches() == len(os.sched_getaffinity(0))
  with pytest.raises(OverrideError, match="concurrent_batches=-1 must be >= 0"):
    hp.override("concurrent_batches=-1")


def test_one_search_for_several_alphas_decodes_what_each_alpha_alone_does(trained):
  """Decoder.decode_nbest_per_alpha and DecodePipeline.decode_per_alpha: per alpha, the beams,
  scores, lines and metrics of a decode with that alpha alone, from one search per batch
  (compiled, the search alone: tests/test_search.py)."""
  model, sources = trained
  alphas = [0.0, 0.6, 2.0, 5.0]
  hp = DecodeHParams(beam_size=3, extra_length=6, nbest=3, batch_size=8, xla="false")
  together = Decoder(model, hp).decode_nbest_per_alpha(sources, alphas)
  assert len(together) == len(alphas)
  for alpha, beams in zip(alphas, together):
    alone = Decoder(model, hp.override(f"alpha={alpha}")).decode_nbest(sources)
    assert [[ids for ids, _ in b] for b in beams] == [[ids for ids, _ in b] for b in alone]
    np.testing.assert_allclose([[sc for _, sc in b] for b in beams],
                               [[sc for _, sc in b] for b in alone], rtol=1e-6)
  assert any(together[0][i] != together[-1][i] for i in range(len(sources)))  # alpha matters.

  lines = [" ".join(map(str, s)) for s in sources[:10]]
  pipeline = DecodePipeline(_WordsProblem(), model, hp.override("write_beam_scores=true"))
  references = pipeline.decode(lines).best
  per_alpha = pipeline.decode_per_alpha(lines, alphas, references)
  assert len(per_alpha) == len(alphas)
  # The searches are the Decoder's, checked above for every alpha: the pipeline's lines and
  # metrics per alpha are checked at the first and the last (each decode alone traces anew).
  for alpha, decoded in [(alphas[0], per_alpha[0]), (alphas[-1], per_alpha[-1])]:
    scored = hp.override(f"alpha={alpha},write_beam_scores=true")
    alone = decode_lines(_WordsProblem(), model, scored, lines, references)
    assert decoded.lines == alone.lines and decoded.metrics == alone.metrics
  greedy = Decoder(model, hp.override("beam_size=1,nbest=0"))
  assert greedy.decode_nbest_per_alpha(sources, alphas) == [greedy.decode_nbest(sources)] * 4


def test_the_last_batch_is_not_padded_onto_a_shape_nothing_will_reuse(trained):
  """Empty rows pay only by reusing a compiled shape: a call's last batch, at a width no
  earlier batch had, keeps its own row count (a parsing batch of 17 sentences padded to 64
  rows cost as much as 64 sentences); a second call reuses every shape of the first."""
  model, sources = trained
  hp = DecodeHParams(beam_size=2, extra_length=3, batch_size=4, batch_tokens=0)
  decoder = Decoder(model, hp)
  by_length = sorted(sources, key=len)
  chosen = by_length[:4] + [by_length[-1]]  # The longest alone in the last batch, at a new width.
  first = decoder.decode_ids(chosen)
  width = -(-(len(by_length[-1]) + 1) // hp.length_multiple) * hp.length_multiple
  assert (1, width) in decoder.shapes_seen and (4, width) not in decoder.shapes_seen
  shapes = set(decoder.shapes_seen)
  assert decoder.decode_ids(chosen) == first and decoder.shapes_seen == shapes
  assert first == Decoder(model, hp.override("pad_batch_rows=false")).decode_ids(chosen)
