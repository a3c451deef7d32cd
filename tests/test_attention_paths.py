"""The one attention interface: its fused and explicit paths agree, and returned weights are
true distributions, against a numpy construction of the paper's formula (Section 3.2.1)."""

import keras
import numpy as np
import pytest
from keras import ops

from t2tlite.layers import attention

B, T, H, D = 3, 6, 2, 8
LENGTHS = np.array([6, 4, 1])  # Sentence 0 has no padding, sentence 2 one real token.


def _qkv(seed, t=T, s=T):
  rng = np.random.RandomState(seed)
  return (rng.randn(B, t, H, D).astype(np.float32), rng.randn(B, s, H, D).astype(np.float32),
          rng.randn(B, s, H, D).astype(np.float32))


def _key_mask(s=T):
  return np.arange(s)[None, :] < LENGTHS[:, None]  # [b, s] True = real


def numpy_attention(q, k, v, allowed):
  """softmax(Q K^T / sqrt(d_k)) V with disallowed logits removed, per head, in float64."""
  logits = np.einsum("bthd,bshd->bhts", q, k).astype(np.float64) / np.sqrt(q.shape[-1])
  logits = np.where(allowed, logits, -np.inf)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  return np.einsum("bhts,bshd->bthd", weights, v), weights


@pytest.mark.parametrize("causal", [False, True])
def test_fused_and_explicit_paths_agree_with_padding_and_causal_mask(causal, monkeypatch):
  # As under JAX, where keras.ops.dot_product_attention is an op of its own: here it runs
  # Keras's TensorFlow version of it, the fused path's numbers.
  monkeypatch.setattr(attention, "_fused_path_has_its_own_op", lambda: True)
  q, k, v = _qkv(0)
  mask = _key_mask()[:, None, None, :]
  calls = []
  fused_op = ops.dot_product_attention
  monkeypatch.setattr(ops, "dot_product_attention",
                      lambda *a, **kw: calls.append(kw) or fused_op(*a, **kw))
  fused = np.asarray(attention.scaled_dot_product_attention(q, k, v, mask, causal=causal))
  assert len(calls) == 1  # The paper's plain attention goes to keras.ops.dot_product_attention.
  explicit, _ = attention.attention_with_weights(q, k, v, mask, causal=causal)
  explicit = np.asarray(explicit)
  assert len(calls) == 1
  np.testing.assert_allclose(fused, explicit, rtol=0, atol=1e-5)
  allowed = mask & (np.tril(np.ones((T, T), bool)) if causal else True)
  want, _ = numpy_attention(q, k, v, allowed)
  np.testing.assert_allclose(explicit, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_tensorflow_takes_the_explicit_path_for_plain_attention(causal, monkeypatch):
  """Under TensorFlow (this suite's backend) Keras's dot_product_attention is never called:
  the explicit path computes the paper's attention, against numpy's."""
  assert keras.config.backend() == "tensorflow"
  monkeypatch.setattr(ops, "dot_product_attention", None)  # Any use would fail.
  q, k, v = _qkv(4)
  mask = _key_mask()[:, None, None, :]
  got = np.asarray(attention.scaled_dot_product_attention(q, k, v, mask, causal=causal))
  allowed = mask & (np.tril(np.ones((T, T), bool)) if causal else True)
  np.testing.assert_allclose(got, numpy_attention(q, k, v, allowed)[0], rtol=0, atol=1e-5)


def test_single_query_and_dropout_take_the_explicit_path(monkeypatch):
  monkeypatch.setattr(attention, "_fused_path_has_its_own_op", lambda: True)
  monkeypatch.setattr(ops, "dot_product_attention", None)  # Any use would fail.
  q, k, v = _qkv(1, t=1)
  mask = _key_mask()[:, None, None, :]
  out = np.asarray(attention.scaled_dot_product_attention(q, k, v, mask))
  np.testing.assert_allclose(out, numpy_attention(q, k, v, mask)[0], rtol=0, atol=1e-5)
  q, k, v = _qkv(2)
  dropped = attention.scaled_dot_product_attention(q, k, v, mask, 0.3,
                                                   keras.random.SeedGenerator(5))
  assert np.asarray(dropped).shape == (B, T, H, D)


def test_returned_weights_are_distributions_over_real_keys():
  q, k, v = _qkv(3)
  real = _key_mask()
  mask = real[:, None, None, :]
  context, weights = attention.attention_with_weights(
      q, k, v, mask, causal=True, query_mask=real[:, None, :, None])
  weights = np.asarray(weights)
  assert weights.shape == (B, H, T, T)
  allowed = mask & np.tril(np.ones((T, T), bool))  # [b, 1, t, s]
  allowed_rows = np.broadcast_to(allowed, weights.shape)
  query_rows = np.broadcast_to(real[:, None, :, None], weights.shape)
  # Real queries: rows sum to 1 over the keys they may see, and masked entries are exactly 0.
  real_queries = np.broadcast_to(real[:, None, :], weights.shape[:3])  # [b, h, t]
  np.testing.assert_allclose(weights.sum(-1)[real_queries], 1.0, atol=1e-6)
  assert np.all(weights[query_rows & ~allowed_rows] == 0.0)
  # Padded queries: the whole row is 0 (not uniform).
  assert np.all(weights[~real_queries] == 0.0)
  want_context, want_weights = numpy_attention(q, k, v, allowed)
  np.testing.assert_allclose(weights[query_rows], want_weights[query_rows], atol=1e-6)
  # The context is what the fused path gives, padded query rows included.
  np.testing.assert_allclose(np.asarray(context), want_context, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_query_scaled_first_is_the_product_scaled_bit_for_bit_at_d_k_64(dtype):
  """The explicit path scales the query before Q K^T (tensor2tensor's order, and the faster one
  under oneDNN); at d_k = 64 (base and big) the scale is 2^-3, so its weights are those of
  the product scaled in float32, to the last bit, in either dtype."""
  rng = np.random.RandomState(7)
  q, k, v = (ops.cast(rng.randn(B, T, H, 64) * 3.0, dtype) for _ in range(3))
  mask = _key_mask()[:, None, None, :] & np.tril(np.ones((T, T), bool))
  _, weights = attention.attention_with_weights(q, k, v, mask)
  logits = ops.cast(ops.einsum("bthd,bshd->bhts", q, k), "float32") * 0.125
  want = ops.softmax(logits + ops.where(mask, 0.0, attention.NEG_INF), axis=-1)
  np.testing.assert_array_equal(np.asarray(weights), np.asarray(want))


def test_segment_masks_attend_within_each_segment():
  """Two segments packed in one row give what each gets alone."""
  q, k, v = _qkv(4)
  segments = np.array([[1, 1, 1, 2, 2, 2]] * B, np.int32)
  got = np.asarray(attention.scaled_dot_product_attention(
      q, k, v, causal=True, segment_ids=(segments, segments)))
  for lo, hi in ((0, 3), (3, 6)):
    alone = np.asarray(attention.scaled_dot_product_attention(
        q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], causal=True))
    np.testing.assert_allclose(got[:, lo:hi], alone, atol=1e-5)


def test_layer_weights_method_matches_call():
  rng = np.random.RandomState(5)
  x = rng.randn(B, T, 16).astype(np.float32)
  real = _key_mask()
  layer = attention.MultiHeadAttention(num_heads=H, key_dim=4, value_dim=4)
  out = np.asarray(layer(x, attention_mask=real[:, None, None, :], causal=True))
  out2, weights = layer.call_with_attention_weights(
      x, attention_mask=real[:, None, None, :], causal=True, query_mask=real)
  np.testing.assert_array_equal(np.asarray(out2), out)  # The same path as `call`: bit for bit.
  assert np.asarray(weights).shape == (B, H, T, T)
  assert np.all(np.asarray(weights)[2, :, 1:] == 0.0)  # Sentence 2: queries 1.. are padding.


def test_layer_attention_dropout_draws_new_masks_and_keeps_the_mean():
  """Dropout on the weights (explicit path): a new mask per call, rescaled by 1 / (1 - rate)."""
  rng = np.random.RandomState(6)
  q, k, v = rng.randn(1, 4, 1, 4), rng.randn(1, 64, 1, 4), rng.randn(1, 64, 1, 4)
  q, k, v = (x.astype(np.float32) for x in (q, k, v))
  seeds = keras.random.SeedGenerator(7)
  draws = np.stack([np.asarray(attention.scaled_dot_product_attention(q, k, v, None, 0.5, seeds))
                    for _ in range(400)])
  assert not np.allclose(draws[0], draws[1])
  exact = numpy_attention(q, k, v, True)[0]
  np.testing.assert_allclose(draws.mean(0), exact, atol=0.1)  # 4 standard errors of the mean


@pytest.mark.parametrize("flash", [False, True])
def test_flash_attention_hparam_reaches_every_fused_call(flash, monkeypatch):
  """hparams flash_attention goes to keras.ops.dot_product_attention as False (forbid the
  flash kernel) or None (Keras decides), never True: True makes Keras raise where no flash
  kernel exists, and a CPU has none, so a model asking for it still runs here, with the
  numbers of the XLA path. The fused path is taken as under JAX (under TensorFlow it never is)."""
  monkeypatch.setattr(attention, "_fused_path_has_its_own_op", lambda: True)
  from t2tlite.models.transformer import Transformer
  from tests.helpers import tiny_hparams
  hp = tiny_hparams()
  rng = np.random.RandomState(0)
  batch = {"inputs": rng.randint(2, 20, (2, 5)).astype("int32"),
           "targets": rng.randint(2, 20, (2, 4)).astype("int32")}
  batch["inputs"][1, 3:] = 0  # Padding, so every fused call carries a mask.
  keras.utils.set_random_seed(0)
  reference = Transformer(hp)
  want = np.asarray(reference(batch, training=False))
  calls = []
  fused_op = ops.dot_product_attention
  monkeypatch.setattr(ops, "dot_product_attention",
                      lambda *a, **kw: calls.append(kw["flash_attention"]) or fused_op(*a, **kw))
  model = Transformer(hp.replace(flash_attention=flash))
  model.set_weights(reference.get_weights())
  got = np.asarray(model(batch, training=False))
  layers = hp.num_encoder_layers + 2 * hp.num_decoder_layers  # Self, and encoder-decoder.
  assert calls == [None if flash else False] * layers
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
