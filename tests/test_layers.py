"""Layers against independent truth: the paper's formulas (numpy) and Keras's own MHA."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2tlite.constants import PAD_ID
from t2tlite.layers import attention, dropout, embedding, transformer_layers
from tests.helpers import paper_positional_encoding
from tests.layer_test_case import run_layer_test


@pytest.mark.parametrize("d_model", [8, 64, 512])
def test_sinusoids_match_paper_formula(d_model):
  got = embedding.sinusoid_encoding(tf.range(100), d_model).numpy()
  np.testing.assert_allclose(got, paper_positional_encoding(100, d_model), atol=2e-5)


def test_position_layer_adds_encoding_from_start_index():
  x = tf.zeros([2, 3, 16])
  got = embedding.SinusoidalPositionEncoding()(x, start_index=5).numpy()
  np.testing.assert_allclose(got[1], paper_positional_encoding(8, 16)[5:8], atol=1e-5)


def test_shared_embedding_scales_and_ties():
  layer = embedding.SharedEmbedding(vocab_size=11, d_model=16)
  ids = tf.constant([[1, 5, 10]])
  vectors = layer(ids).numpy()
  table = layer.embeddings.numpy()
  np.testing.assert_allclose(vectors[0], table[[1, 5, 10]] * 4.0, rtol=1e-6)  # sqrt(16) = 4
  x = np.random.RandomState(0).randn(1, 2, 16).astype(np.float32)
  np.testing.assert_allclose(layer(x, reverse=True).numpy(), x @ table.T, rtol=1e-5, atol=1e-5)


def test_shared_embedding_under_mixed_bfloat16_equals_the_cast_table():
  """Lookups gather float32 rows and cast them; the projection casts the table: values and
  the table's gradient are those of the whole table cast to bfloat16 at each use (as Keras's
  autocast did), each use's gradient summed in float32."""
  layer = embedding.SharedEmbedding(vocab_size=11, d_model=16, dtype="mixed_bfloat16")
  layer.build()
  rng = np.random.RandomState(3)
  ids = tf.constant([[1, 5, 10, 5], [0, 2, 2, 7]])
  x = tf.constant(rng.randn(2, 3, 16), tf.bfloat16)
  weights = tf.constant(rng.randn(2, 4, 16), tf.bfloat16)

  def loss(lookup, project):
    return (tf.reduce_sum(tf.cast(lookup * weights, tf.float32)) +
            tf.reduce_sum(tf.nn.log_softmax(tf.cast(project, tf.float32))))

  with tf.GradientTape() as tape:
    got_vectors, got_logits = layer(ids), layer(x, reverse=True)
    got = loss(got_vectors, got_logits)
  got_grad = tf.convert_to_tensor(tape.gradient(got, layer.embeddings.value))
  table = tf.Variable(layer.embeddings.numpy())
  with tf.GradientTape() as tape:
    vectors = tf.gather(tf.cast(table, tf.bfloat16), ids) * tf.constant(4.0, tf.bfloat16)
    projection = tf.reshape(x, [-1, 16]) @ tf.transpose(tf.cast(table, tf.bfloat16))
    logits = tf.reshape(projection, [2, 3, 11])
    want = loss(vectors, logits)
  want_grad = tf.convert_to_tensor(tape.gradient(want, table))
  assert got_vectors.dtype == tf.bfloat16 and got_logits.dtype == tf.bfloat16
  np.testing.assert_array_equal(got_vectors.numpy().astype(np.float32),
                                vectors.numpy().astype(np.float32))
  np.testing.assert_array_equal(got_logits.numpy().astype(np.float32),
                                logits.numpy().astype(np.float32))
  np.testing.assert_array_equal(got_grad.numpy(), want_grad.numpy())


def _copy_to_keras_mha(ours, theirs, d_model):
  """Our Dense kernels [d, h*d_k] are Keras's EinsumDense kernels [d, h, d_k] reshaped."""
  h, dk, dv = ours.num_heads, ours.key_dim, ours.value_dim
  theirs.set_weights([
      ours.query_dense.kernel.numpy().reshape(d_model, h, dk),
      ours.key_dense.kernel.numpy().reshape(d_model, h, dk),
      ours.value_dense.kernel.numpy().reshape(d_model, h, dv),
      ours.output_dense.kernel.numpy().reshape(h, dv, d_model),
  ])


@pytest.mark.parametrize("num_heads,key_dim,value_dim", [(4, 8, 8), (2, 4, 16), (1, 32, 32)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_keras_multi_head_attention(num_heads, key_dim, value_dim, causal):
  rng = np.random.RandomState(1)
  d_model, batch, t, s = 32, 3, 5, 5 if causal else 7
  query = rng.randn(batch, t, d_model).astype(np.float32)
  value = query if causal else rng.randn(batch, s, d_model).astype(np.float32)
  lengths = np.array([s, 3, 1])
  key_mask = np.arange(s)[None, :] < lengths[:, None]  # [b, s] True = real
  ours = attention.MultiHeadAttention(num_heads, key_dim, value_dim)
  out = ours(query, value, attention_mask=key_mask[:, None, None, :], causal=causal).numpy()
  theirs = keras.layers.MultiHeadAttention(num_heads, key_dim, value_dim, use_bias=False)
  theirs(query, value)
  _copy_to_keras_mha(ours, theirs, d_model)
  mask = np.repeat(key_mask[:, None, :], t, axis=1)
  expected = theirs(query, value, attention_mask=mask, use_causal_mask=causal).numpy()
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_masks_safe_in_16_bit(dtype, fused, monkeypatch):
  """Padded queries (fully masked rows) and -1e9 biases never produce inf or NaN (XLA-compiled),
  on the explicit path (TensorFlow's) and on the fused one (the other backends')."""
  monkeypatch.setattr(attention, "_fused_path_has_its_own_op", lambda: fused)
  compiled = tf.function(attention.scaled_dot_product_attention, jit_compile=True)
  rng = np.random.RandomState(2)
  q = tf.constant(rng.randn(2, 4, 2, 8), dtype)
  k = tf.constant(rng.randn(2, 4, 2, 8), dtype)
  v = tf.constant(rng.randn(2, 4, 2, 8), dtype)
  fully_masked = tf.zeros([2, 1, 4, 4], tf.bool)
  for mask in (fully_masked, attention.causal_mask(4)):
    out = compiled(q, k, v, mask).numpy().astype(np.float32)
    assert np.isfinite(out).all()
  exact = attention.scaled_dot_product_attention(
      tf.cast(q, tf.float32), tf.cast(k, tf.float32), tf.cast(v, tf.float32),
      attention.causal_mask(4)).numpy()
  low = compiled(q, k, v, attention.causal_mask(4))
  np.testing.assert_allclose(low.numpy().astype(np.float32), exact, atol=0.05)


def test_attention_dropout_is_stateless_and_scaled():
  rng = np.random.RandomState(3)
  q, k, v = (tf.constant(rng.randn(1, 64, 1, 4), tf.float32) for _ in range(3))
  a = attention.scaled_dot_product_attention(q, k, v, None, 0.5, tf.constant([1, 2]))
  b = attention.scaled_dot_product_attention(q, k, v, None, 0.5, tf.constant([1, 2]))
  c = attention.scaled_dot_product_attention(q, k, v, None, 0.5, tf.constant([3, 4]))
  np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert not np.allclose(a.numpy(), c.numpy())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_dropout_drops_the_rate_in_every_dtype(dtype, rate):
  """The drop fraction of 2^22 units is round(rate * 2^16) / 2^16 within 5 binomial standard
  deviations (about 7e-4 at 0.1), bfloat16 included (Keras's TensorFlow dropout draws bfloat16
  uniforms there, which drop 13/128 = 10.16% at rate 0.1); kept units are scaled by 1 / (1 - rate)."""
  layer = dropout.Dropout(rate, seed=11, dtype=dtype)
  x = tf.ones([1024, 4096], dtype)
  dropped = [float(tf.reduce_mean(tf.cast(layer(x, training=True) == 0, tf.float32)))
             for _ in range(2)]
  exact = round(rate * 2 ** 16) / 2 ** 16
  sigma = np.sqrt(exact * (1 - exact) / x.shape.num_elements())
  for fraction in dropped:
    assert abs(fraction - exact) < 5 * sigma, (fraction, exact)
  assert dropped[0] != dropped[1]  # The seed generator moves on at every call.
  y = layer(x, training=True).numpy().astype(np.float32)
  np.testing.assert_array_equal(np.unique(y), [0.0, np.float32(tf.cast(1 / (1 - rate), dtype))])
  np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())


@pytest.mark.parametrize("shape", [(3, 5, 8), (7, 333), (1,)])
def test_dropout_mask_is_a_pure_function_of_the_seed_and_its_gradient_is_the_mask(shape):
  """Even and odd sizes (an odd one leaves half a random word unused): the same seed gives
  the same mask, under XLA too, and d output / d input = mask / (1 - rate)."""
  x = tf.constant(np.random.RandomState(0).randn(*shape), tf.float32)
  seed = tf.constant([5, 6])
  mask = dropout.keep_mask(x, 0.5, seed).numpy()
  np.testing.assert_array_equal(mask, dropout.keep_mask(x, 0.5, seed).numpy())
  compiled = tf.function(lambda t: dropout.keep_mask(t, 0.5, seed), jit_compile=True)
  np.testing.assert_array_equal(mask, compiled(x).numpy())
  if x.shape.num_elements() > 8:
    assert 0 < mask.mean() < 1
    assert not np.array_equal(mask, dropout.keep_mask(x, 0.5, tf.constant([5, 7])).numpy())
  layer = dropout.Dropout(0.25, seed=2)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = layer(x, training=True)
  grad = tape.gradient(y, x).numpy()
  kept = y.numpy() != 0
  np.testing.assert_allclose(grad, kept / 0.75, rtol=1e-6)
  np.testing.assert_allclose(y.numpy()[kept], x.numpy()[kept] / 0.75, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dropout_is_the_input_times_mask_times_scale_bit_for_bit(dtype):
  """Dropout multiplies by one factor (0 or 1 / (1 - rate)); the textbook x * mask * scale
  gives the same bits forward and backward, signed zeros included, at a rate whose scale is
  rounded in bfloat16 (1 / 0.9)."""
  rate = 0.1
  layer = dropout.Dropout(rate, seed=3, dtype=dtype)
  x = tf.cast(tf.constant(np.random.RandomState(1).randn(64, 96), tf.float32), dtype)
  upstream = tf.cast(tf.constant(np.random.RandomState(2).randn(64, 96), tf.float32), dtype)
  seed = layer.seed_generator.state.numpy()
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = layer(x, training=True)
  grad = tape.gradient(y, x, output_gradients=upstream)
  mask = tf.cast(dropout.keep_mask(x, rate, tf.constant(seed)), dtype)
  scale = tf.cast(1.0 / (1.0 - rate), dtype)
  with tf.GradientTape() as tape:
    tape.watch(x)
    textbook = x * mask * scale
  textbook_grad = tape.gradient(textbook, x, output_gradients=upstream)
  bits = lambda t: tf.bitcast(t, tf.uint16 if dtype == "bfloat16" else tf.uint32).numpy()
  np.testing.assert_array_equal(bits(y), bits(textbook))
  np.testing.assert_array_equal(bits(grad), bits(textbook_grad))
  assert (bits(y) == bits(tf.constant(-0.0, dtype))).any()  # A dropped negative unit: -0.0.


def test_attention_layer_contract():
  x = np.random.RandomState(4).randn(2, 5, 16).astype(np.float32)
  run_layer_test(attention.MultiHeadAttention,
                 dict(num_heads=2, key_dim=4, value_dim=6, dropout=0.1),
                 inputs=(x, x), expected_output_shape=(2, 5, 16),
                 expected_num_trainable_weights=4)


def test_feed_forward_contract_and_formula():
  x = np.random.RandomState(5).randn(2, 3, 8).astype(np.float32)
  layer, out = run_layer_test(transformer_layers.FeedForward, dict(d_ff=12), inputs=(x,),
                              expected_output_shape=(2, 3, 8), expected_num_trainable_weights=4)
  w1, b1, w2, b2 = layer.get_weights()
  np.testing.assert_allclose(out, np.maximum(0, x @ w1 + b1) @ w2 + b2, rtol=1e-5, atol=1e-5)


LAYER_ARGS = dict(num_heads=2, key_dim=4, value_dim=4, d_ff=16, dropout=0.1)


@pytest.mark.parametrize("position", ["post", "pre"])
def test_encoder_layer_contract(position):
  x = np.random.RandomState(6).randn(2, 5, 8).astype(np.float32)
  mask = attention.padding_mask(tf.constant([[3, 4, 5, 1, 0], [3, 1, 0, 0, 0]]))
  run_layer_test(transformer_layers.EncoderLayer, dict(LAYER_ARGS, layer_norm_position=position),
                 inputs=(x,), call_kwargs=dict(padding_mask=mask),
                 expected_output_shape=(2, 5, 8), expected_num_trainable_weights=4 + 4 + 4)


@pytest.mark.parametrize("position", ["post", "pre"])
def test_decoder_layer_contract(position):
  rng = np.random.RandomState(7)
  x = rng.randn(2, 4, 8).astype(np.float32)
  memory = rng.randn(2, 6, 8).astype(np.float32)
  run_layer_test(transformer_layers.DecoderLayer, dict(LAYER_ARGS, layer_norm_position=position),
                 inputs=(x, memory), expected_output_shape=(2, 4, 8),
                 expected_num_trainable_weights=4 + 4 + 4 + 6)


def test_post_norm_output_is_normalised_and_pre_norm_is_not():
  """Post-norm ends each sub-layer with LayerNorm (zero mean, unit variance per position)."""
  x = 3.0 + 5.0 * np.random.RandomState(8).randn(2, 5, 8).astype(np.float32)
  post = transformer_layers.EncoderLayer(**LAYER_ARGS)(x).numpy()
  np.testing.assert_allclose(post.mean(-1), 0.0, atol=1e-4)
  np.testing.assert_allclose(post.std(-1), 1.0, atol=1e-2)
  pre = transformer_layers.EncoderLayer(**LAYER_ARGS, layer_norm_position="pre")(x).numpy()
  assert abs(pre.mean()) > 1.0  # The residual stream keeps the input's offset.


def test_embedding_and_position_contracts():
  ids = np.array([[2, 3, 4]], np.int32)
  run_layer_test(embedding.SharedEmbedding, dict(vocab_size=7, d_model=4), inputs=(ids,),
                 expected_output_shape=(1, 3, 4), expected_num_trainable_weights=1)
  x = np.ones((1, 3, 4), np.float32)
  run_layer_test(embedding.LearnedPositionEmbedding, dict(max_position=10), inputs=(x,),
                 expected_output_shape=(1, 3, 4), expected_num_trainable_weights=1)
  run_layer_test(embedding.SinusoidalPositionEncoding, {}, inputs=(x,),
                 expected_output_shape=(1, 3, 4), expected_num_trainable_weights=0)


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_symbol_dropout_pads_the_rate_of_real_tokens_in_training_only(rate):
  """Of 2^18 real ids, the fraction turned into PAD_ID is the rate within 5 binomial standard
  deviations; padding stays padding, kept ids keep their value, each call draws anew."""
  layer = dropout.SymbolDropout(rate, seed=3)
  rng = np.random.RandomState(0)
  ids = rng.randint(1, 50, size=(512, 512)).astype(np.int32)
  ids[:, 400:] = PAD_ID
  real = ids != PAD_ID
  outs = [layer(tf.constant(ids), training=True).numpy() for _ in range(2)]
  sigma = np.sqrt(rate * (1 - rate) / real.sum())
  for out in outs:
    dropped = (out == PAD_ID) & real
    assert abs(dropped.sum() / real.sum() - rate) < 5 * sigma
    np.testing.assert_array_equal(out[~dropped], ids[~dropped])
  assert not np.array_equal(outs[0], outs[1])
  np.testing.assert_array_equal(layer(tf.constant(ids), training=False).numpy(), ids)
