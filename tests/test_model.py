"""The assembled Transformer: causality, padding, caching, tying, options."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2tlite.decoding import search
from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.decoding.decoder import Decoder
from t2tlite.models.transformer import Transformer
from tests.helpers import paper_positional_encoding, tiny_hparams

SRC = np.array([[5, 6, 7, 8, 1], [9, 4, 1, 0, 0]], np.int32)
TGT = np.array([[3, 4, 5, 6, 7, 1], [8, 9, 10, 1, 0, 0]], np.int32)


def logits_of(model, src, tgt):
  return model({"inputs": tf.constant(src), "targets": tf.constant(tgt)}, training=False).numpy()


@pytest.fixture(scope="module")
def model():
  keras.utils.set_random_seed(0)
  return Transformer(tiny_hparams())


def test_output_shape_and_dtype(model):
  out = logits_of(model, SRC, TGT)
  assert out.shape == (2, 6, 20) and out.dtype == np.float32


def test_changing_future_targets_leaves_earlier_logits_unchanged(model):
  base = logits_of(model, SRC, TGT)
  for t in range(TGT.shape[1]):
    changed = TGT.copy()
    changed[:, t:] = 2 + (changed[:, t:] + 7) % 18  # Different real tokens from t onwards.
    out = logits_of(model, SRC, changed)
    # The logits at position p see targets < p (shifted right): positions <= t are unchanged.
    np.testing.assert_allclose(out[:, :t + 1], base[:, :t + 1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(out[:, t + 1:], base[:, t + 1:]) or t + 1 == TGT.shape[1]


def test_source_padding_leaves_real_positions_unchanged(model):
  base = logits_of(model, SRC, TGT)
  padded = np.pad(SRC, [[0, 0], [0, 4]])  # Four more pad ids on every source.
  np.testing.assert_allclose(logits_of(model, padded, TGT), base, rtol=1e-5, atol=1e-5)


def test_target_padding_leaves_real_positions_unchanged(model):
  base = logits_of(model, SRC, TGT)
  padded = np.pad(TGT, [[0, 0], [0, 3]])
  np.testing.assert_allclose(logits_of(model, SRC, padded)[:, :6], base, rtol=1e-5, atol=1e-5)


def test_batch_rows_are_independent(model):
  both = logits_of(model, SRC, TGT)
  alone = logits_of(model, SRC[1:], TGT[1:])
  np.testing.assert_allclose(alone[0], both[1], rtol=1e-5, atol=1e-5)


def _cached_logits(model, src, tgt):
  """Teacher-forced logits computed one position at a time through the KV cache."""
  memory, bias = model.encode(tf.constant(src))
  state, context = model.initial_decode_state(memory, bias, tgt.shape[1])
  decoder_inputs = np.pad(tgt, [[0, 0], [1, 0]])[:, :-1]  # Shift right.
  steps = []
  for t in range(tgt.shape[1]):
    logits, state = model.decode_step(tf.constant(decoder_inputs[:, t]), tf.constant(t), state,
                                      context)
    steps.append(logits.numpy())
  return np.stack(steps, axis=1)


@pytest.mark.parametrize("changes", [
    {}, {"layer_norm_position": "pre"}, {"position_encoding": "learned"},
    {"d_k": 4, "d_v": 12}, {"xla": False},
])
def test_cached_incremental_decoding_equals_full_forward(changes):
  keras.utils.set_random_seed(1)
  model = Transformer(tiny_hparams(**changes))
  np.testing.assert_allclose(_cached_logits(model, SRC, TGT), logits_of(model, SRC, TGT),
                             rtol=1e-4, atol=1e-4)


def test_cached_greedy_search_equals_greedy_by_full_recomputation(model):
  """The tensor2tensor testSlowVsFast check: fast (cached) decode == slow (recompute) decode."""
  length = 7  # Decode length = source width 5 + extra_length 2; both rows may use all of it.
  decoder = Decoder(model, DecodeHParams(beam_size=1, extra_length=2))
  fast = decoder.search_ids(tf.constant(SRC), tf.constant([5, 5])).ids[:, 0].numpy()
  slow = np.zeros([2, 0], np.int32)
  for _ in range(length + 1):  # Recompute the whole prefix every step, then extend by argmax.
    logits = logits_of(model, SRC, np.concatenate([slow, np.zeros([2, 1], np.int32)], 1))
    slow = np.concatenate([slow, logits[:, -1].argmax(-1)[:, None].astype(np.int32)], 1)
  for row in range(2):
    stop = list(slow[row]).index(1) + 1 if 1 in slow[row] else length
    np.testing.assert_array_equal(fast[row, :stop], slow[row, :stop])
    if stop == length:  # No EOS within the budget: the search forces it at max length.
      assert fast[row, length] == 1


def test_three_way_weight_tying():
  model = Transformer(tiny_hparams())
  assert model.source_embedding is model.target_embedding
  names = [w.path for w in model.trainable_weights if "embedding" in w.path]
  assert len(names) == 1, names
  # Logits are the decoder output times the embedding matrix transposed.
  ids = tf.constant([[3, 4]])
  table = model.target_embedding.embeddings.numpy()
  x = np.random.RandomState(0).randn(1, 2, 32).astype(np.float32)
  np.testing.assert_allclose(model.target_embedding(x, reverse=True).numpy(), x @ table.T,
                             rtol=1e-5, atol=1e-5)
  del ids


def test_separate_vocabularies_option():
  hp = tiny_hparams(shared_source_target_embedding=False, input_vocab_size=30,
                    target_vocab_size=20, shared_embedding_and_softmax_weights=False)
  model = Transformer(hp)
  assert model.source_embedding is not model.target_embedding
  src = np.array([[25, 29, 1]], np.int32)  # Ids beyond the target vocabulary are fine at source.
  assert logits_of(model, src, TGT[:1]).shape == (1, 6, 20)
  tied = Transformer(tiny_hparams())
  d, v = 32, 20
  assert model.count_params() - tied.count_params() == 30 * d + v * d  # Source table + softmax.


def test_embeddings_are_scaled_by_sqrt_d_model():
  """Section 3.4: the encoder input is E[id] * sqrt(d_model) + PE (dropout off)."""
  model = Transformer(tiny_hparams())
  ids = tf.constant([[4, 7]])
  got = model.source_position(model.source_embedding(ids)).numpy()
  table = model.source_embedding.embeddings.numpy()
  np.testing.assert_allclose(got[0], table[[4, 7]] * np.sqrt(32) + paper_positional_encoding(2, 32),
                             rtol=1e-5, atol=1e-5)


def test_config_round_trip():
  model = Transformer(tiny_hparams(layer_norm_position="pre"))
  clone = Transformer.from_config(model.get_config())
  assert clone.hparams == model.hparams
  clone.set_weights(model.get_weights())
  np.testing.assert_allclose(logits_of(clone, SRC, TGT), logits_of(model, SRC, TGT), rtol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_16_bit_policies_match_float32_with_padding(policy):
  """Padded sources and causal masks stay finite and close to float32 in 16-bit compute."""
  keras.utils.set_random_seed(2)
  fp32 = Transformer(tiny_hparams())
  low = Transformer(tiny_hparams(dtype=policy))
  low.set_weights(fp32.get_weights())
  a, b = logits_of(fp32, SRC, TGT), logits_of(low, SRC, TGT)
  # The graph's logits stay in the compute dtype: the loss casts them inside its cluster.
  assert str(b.dtype) == keras.DTypePolicy(policy).compute_dtype
  b = b.astype(np.float32)
  assert np.isfinite(b).all()
  np.testing.assert_allclose(b, a, atol=0.15)
  assert (a.argmax(-1) == b.argmax(-1)).mean() > 0.8


def test_the_shared_table_is_cast_to_bfloat16_once_a_training_step():
  """One [vocab, d_model] matrix serves source, target and softmax; under mixed_bfloat16 a
  step casts the whole table once (for the projection), not once per use (Keras's autocast
  cast it three times forward): at vocab 37000 each extra cast is 19M values."""
  vocab, d_model = 37, 32
  model = Transformer(tiny_hparams(dtype="mixed_bfloat16", input_vocab_size=vocab,
                                   target_vocab_size=vocab))
  table = model.target_embedding.embeddings
  assert model.source_embedding is model.target_embedding

  @tf.function
  def step(src, tgt):
    with tf.GradientTape() as tape:
      logits = model({"inputs": src, "targets": tgt}, training=True)
      loss = tf.reduce_mean(tf.reduce_logsumexp(logits, -1))
    return tape.gradient(loss, table.value)

  graph = step.get_concrete_function(tf.constant(SRC), tf.constant(TGT)).graph
  whole_table_casts = [
      op for op in graph.get_operations() if op.type == "Cast"
      and op.outputs[0].shape.as_list() == [vocab, d_model]]
  # The forward cast of the table, and its gradient cast back to float32.
  assert sorted(op.get_attr("DstT").name for op in whole_table_casts) == [
      "bfloat16", "float32"]


@pytest.mark.parametrize("decoder_layers", [2, 0])
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_16_bit_cached_decoding_equals_its_full_forward(policy, decoder_layers):
  """The KV cache holds the layers' compute dtype, so a 16-bit model decodes (beams too),
  also with no decoder layers (allowed by the hparams; the cache is then empty)."""
  keras.utils.set_random_seed(2)
  low = Transformer(tiny_hparams(dtype=policy, num_decoder_layers=decoder_layers))
  cached = _cached_logits(low, SRC, TGT)
  assert cached.dtype == np.float32  # Decoding's per-position logits stay float32.
  np.testing.assert_allclose(cached, logits_of(low, SRC, TGT).astype(np.float32), atol=0.05)
  beams = Decoder(low, DecodeHParams(beam_size=3, extra_length=2)).search_ids(
      tf.constant(SRC), tf.constant([5, 3]))
  assert beams.ids.shape[:2] == (2, 3) and np.isfinite(beams.scores.numpy()).all()


def test_missing_vocab_size_is_a_clear_error():
  from t2tlite.hparams_record import HParamsError
  with pytest.raises(HParamsError, match="vocab_size"):
    Transformer(tiny_hparams(input_vocab_size=0))


@pytest.mark.parametrize("xla", [True, False])
def test_beam_search_with_append_only_cache_equals_recomputation(xla):
  """Cached beams (caches never copied, only the history table reordered) == uncached beams.

  A random model reorders its beams at almost every step, so a wrong history
  table would change the hypotheses or their scores.
  """
  keras.utils.set_random_seed(3)
  model = Transformer(tiny_hparams(xla=xla))
  # Decode length 6 (source width 5 + extra_length 1); at most 6 and 4 tokens per sentence.
  hp = DecodeHParams(beam_size=3, alpha=0.6, extra_length=1)

  def run(use_cache):
    decoder = Decoder(model, hp.override(f"use_cache={use_cache}"))
    return decoder.search_ids(tf.constant(SRC), tf.constant([5, 3]))

  cached, uncached = run(True), run(False)
  np.testing.assert_array_equal(cached.ids.numpy(), uncached.ids.numpy())
  np.testing.assert_allclose(cached.scores.numpy(), uncached.scores.numpy(), atol=1e-5)


def test_grouped_cross_attention_equals_attention_over_tiled_memory():
  """attend_grouped (k queries per sentence over one copy of its memory) == attend on k copies."""
  keras.utils.set_random_seed(4)
  model = Transformer(tiny_hparams())
  layer = model.decoder_layers[0].cross_attention
  memory, mask = model.encode(tf.constant(SRC))
  key, value = layer.project_key_value(memory)
  query = layer.project_query(tf.random.normal([2 * 3, 1, 32]))
  grouped = layer.attend_grouped(query, key, value, mask)
  tiled = search.tile_to_beams((key, value, mask), 3)
  np.testing.assert_allclose(grouped.numpy(), layer.attend(query, *tiled).numpy(), atol=1e-5)


def test_symbol_dropout_is_the_model_fed_padded_ids():
  """A training call with symbol_dropout (every other dropout off) equals the model without it,
  same weights, fed the ids the layers drop: dropped source words leave attention as padding
  does (t2t's encoder reads its padding from them), a dropped decoder input reads PAD_ID."""
  keras.utils.set_random_seed(4)
  no_dropout = dict(dropout=0.0, attention_dropout=0.0, relu_dropout=0.0)
  plain = Transformer(tiny_hparams(**no_dropout))
  model = Transformer(tiny_hparams(symbol_dropout=0.4, **no_dropout))
  weights = {v.path: v for v in model.weights}
  for v in plain.weights:
    v.assign(weights[v.path])
  layers = [model.get_layer(f"{side}_symbol_dropout") for side in ("source", "target")]
  states = [layer.seed_generator.state.numpy() for layer in layers]
  src = tf.constant(np.tile(SRC, [4, 1]))
  tgt = np.tile(TGT, [4, 1])
  dropped_src = layers[0](src, training=True).numpy()
  dropped_dec = layers[1](tf.constant(np.pad(tgt, [[0, 0], [1, 0]])[:, :-1]), training=True).numpy()
  assert (dropped_src != src.numpy()).any() and (dropped_dec[:, 1:] != tgt[:, :-1]).any()
  for layer, state in zip(layers, states):
    layer.seed_generator.state.assign(state)
  trained = model({"inputs": src, "targets": tf.constant(tgt)}, training=True).numpy()
  # targets whose right shift is the dropped decoder input (its first position is PAD_ID anyway).
  fed = np.concatenate([dropped_dec[:, 1:], tgt[:, -1:]], axis=1)
  np.testing.assert_allclose(trained, logits_of(plain, dropped_src, fed), rtol=1e-5, atol=1e-5)
  assert not np.allclose(trained, logits_of(plain, src.numpy(), tgt), atol=1e-3)
  np.testing.assert_allclose(logits_of(model, src.numpy(), tgt), logits_of(plain, src.numpy(), tgt),
                             rtol=1e-6, atol=1e-6)
