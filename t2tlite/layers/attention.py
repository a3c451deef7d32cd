"""Scaled dot-product and multi-head attention (Section 3.2), in keras.ops.

Tensors keep the layout [batch, length, heads, depth] throughout (the layout
of keras.layers.MultiHeadAttention and of `keras.ops.dot_product_attention`),
so the per-head projections are plain Dense layers reshaped, and the
incremental decoder updates its key/value cache at one position with a
scatter, without transposes.

One attention function, two paths computing the same numbers:
- the fused path, `keras.ops.dot_product_attention`, where the attention is
  exactly the paper's (scale 1/sqrt(d_k), a boolean mask, nothing else) and
  the backend has an op of its own for it (JAX: `jax.nn.dot_product_attention`,
  whose matmul-softmax-matmul XLA fuses). With `flash_attention` Keras may hand
  it to a flash kernel instead (cuDNN, under JAX on GPUs). That is off by
  default: on an H200 at the paper's batch (~25k target tokens, bf16) the
  cuDNN kernel made the whole training step 1.9x slower at length 32 (its
  tiles are longer than these sentences) and about 1.4x slower at 64
  (bench/README.md, "GPU");
- the explicit path (matmul, float32 softmax, optional dropout), used when
  attention dropout is on, when segment masks apply, when the weights are
  asked for (`attention_with_weights`, whose weights the model's
  `call_with_attention_weights` returns), for a single query position
  (incremental decoding, where a multiply-and-reduce beats tiny matmuls), and
  always under TensorFlow, where Keras's op is the same einsums and softmax
  written out with the scale on the product (`_fused_path_has_its_own_op`).
tests/test_attention_paths.py ties the two.

Masks are booleans (True = may attend), so no dtype policy can touch them
(Keras autocasts float arguments of a layer to its compute dtype, which would
turn a float32 -1e9 bias into -inf in float16). Logits are cast to float32
before the mask and the softmax on both paths: the mask value never meets a
16-bit type, and a fully masked row gives a uniform distribution, not NaN.

Padded query rows. A key padding mask hides padded *keys*; a padded query
still attends over the real keys like any other query, on both paths, and
its output is never read (the loss and the cross-attention mask ignore it).
Only the weights returned by `attention_with_weights` treat padded queries
apart: given `query_mask`, their rows are all zero (not uniform), so that a
view of the weights shows them blank.

Nothing here imports TensorFlow: the model runs on every Keras backend. The
training and decoding steps compile it with the rest of the step.
"""

import keras
from keras import ops

from t2tlite.constants import NEG_INF, PAD_ID
from t2tlite.layers.dropout import keep_mask


def padding_mask(ids, pad_id: int = PAD_ID):
  """[batch, length] token ids -> [batch, 1, 1, length] bool, False at pads."""
  real = ops.not_equal(ids, pad_id)
  return ops.expand_dims(ops.expand_dims(real, 1), 1)


def causal_mask(length):
  """[1, 1, length, length] bool: position i may attend to positions <= i."""
  positions = ops.arange(length)
  return ops.expand_dims(ops.expand_dims(
      ops.greater_equal(ops.expand_dims(positions, 1), ops.expand_dims(positions, 0)), 0), 0)


def segment_mask(query_segments, key_segments):
  """int [b, t] and [b, s] segment ids -> [b, 1, t, s] bool: attend within one segment only."""
  return ops.equal(query_segments[:, None, :, None], key_segments[:, None, None, :])


def packed_attention_masks(inputs_segmentation, targets_segmentation):
  """The three attention masks of a packed batch (several pairs per row).

  Args:
    inputs_segmentation: int [b, s], segment ids of the source tokens: 1, 2, ...
      for the pairs of a row, 0 at padding (tensor2tensor's `inputs_segmentation`).
    targets_segmentation: int [b, t], the same for the targets; pair k of a row
      has segment id k on both sides.
  Returns (bool, True = may attend):
    encoder_self [b, 1, s, s]: a real source token attends to the real source
      tokens of its own pair;
    decoder_self [b, 1, t, t]: a target position attends to the positions of its
      own pair up to itself (the look-ahead mask and the segment mask together);
    encoder_decoder [b, 1, t, s]: a target position attends to the real source
      tokens of its own pair.
  Padding (segment 0) is never attended by a real token: it would only match
  padded queries, whose outputs nothing reads.
  """
  source_real = ops.not_equal(inputs_segmentation, 0)[:, None, None, :]  # [b, 1, 1, s]
  encoder_self = ops.logical_and(segment_mask(inputs_segmentation, inputs_segmentation),
                                 source_real)
  # The look-ahead mask from a running index, not ops.arange(length): the functional
  # graph's length is unknown (None) when this is built.
  index = ops.cumsum(ops.ones_like(targets_segmentation), axis=1)  # [b, t]: 1, 2, ...
  not_after = ops.less_equal(index[:, None, None, :], index[:, None, :, None])
  decoder_self = ops.logical_and(segment_mask(targets_segmentation, targets_segmentation),
                                 not_after)
  encoder_decoder = ops.logical_and(segment_mask(targets_segmentation, inputs_segmentation),
                                    source_real)
  return encoder_self, decoder_self, encoder_decoder


def scaled_dot_product_attention(query, key, value, mask=None, dropout_rate=0.0, seed=None,
                                 causal=False, segment_ids=None, flash_attention=False):
  """softmax(Q K^T / sqrt(d_k)) V over allowed positions, with the softmax in float32.

  Args:
    query: [batch, q_length, heads, d_k].
    key: [batch, kv_length, heads, d_k].
    value: [batch, kv_length, heads, d_v].
    mask: bool, broadcastable to [batch, heads, q_length, kv_length] (True =
      may attend), or None.
    dropout_rate: dropout on the attention weights (Python float).
    seed: for dropout (required when dropout_rate > 0): a
      keras.random.SeedGenerator, an int, or an int [2] seed tensor.
    causal: also mask every key after the query's position (q_length == kv_length).
    segment_ids: None, or (query_segments [b, q_length], key_segments [b, kv_length])
      int: a query attends only to keys of its own segment (packed sequences).
    flash_attention: on the fused path, let Keras choose a flash kernel where the
      platform has one; off, the XLA path (the module docstring says why).
  Returns:
    [batch, q_length, heads, d_v] in the dtype of `value`.
  """
  explicit = (not _fused_path_has_its_own_op() or dropout_rate > 0.0
              or segment_ids is not None or query.shape[1] == 1)
  mask = _combined_mask(query, mask, causal, segment_ids)
  if not explicit:
    return _fused_attention(query, key, value, mask, flash_attention)
  context, _ = _explicit_attention(query, key, value, mask, dropout_rate, seed)
  return context


def _fused_path_has_its_own_op():
  """Whether the backend's `dot_product_attention` is more than the explicit path's ops.

  Under TensorFlow, Keras writes it out with the ops of the explicit path (einsum,
  float32 softmax, einsum), but scales the [b, h, t, s] product instead of the query
  and adds the mask as a bias of the compute dtype. Measured on an AMX host, the
  explicit path ran that attention 1.3-1.9x as fast (alone, forward and backward, one
  core) and the base training step 1.02-1.03x (bf16) and 1.00-1.07x (float32) (both
  cores; bench/README.md, "The attention path under TensorFlow"). Under JAX the op is
  jax.nn's, which XLA fuses.
  """
  return keras.config.backend() != "tensorflow"


def _fused_attention(query, key, value, mask, flash_attention=False):
  """keras.ops.dot_product_attention with the mask as an additive -1e9 bias on the logits.

  The bias is [b, 1, t, s] (padding and look-ahead combined, as the explicit
  path adds them), which keeps the op to the paper's attention plus one add:
  no full-size boolean mask to build per head. The op casts a bias to the
  compute dtype, where -1e9 is finite in float32 and bfloat16 but -inf in
  float16, so under float16 the boolean mask goes in as a mask instead (same
  result: masked logits become the op's large negative number).
  `flash_attention` True passes None (Keras decides: a flash kernel where one
  applies), False forbids it.
  """
  kwargs = dict(scale=query.shape[-1] ** -0.5, flash_attention=None if flash_attention else False)
  if mask is None:
    return ops.dot_product_attention(query, key, value, **kwargs)
  if keras.backend.standardize_dtype(query.dtype) == "float16":
    return ops.dot_product_attention(query, key, value, mask=mask, **kwargs)
  return ops.dot_product_attention(query, key, value, bias=ops.where(mask, 0.0, NEG_INF), **kwargs)


def attention_with_weights(query, key, value, mask=None, dropout_rate=0.0, seed=None,
                           causal=False, segment_ids=None, query_mask=None):
  """The explicit path: (context, weights), same arguments as `scaled_dot_product_attention`.

  `query_mask`: bool broadcastable to [batch, 1, q_length, 1] (True = real
  query), or None; rows of padded queries in the returned weights are zero.
  Returns (context [batch, q_length, heads, d_v] in the dtype of `value`,
  weights [batch, heads, q_length, kv_length] float32): the attention
  probabilities before dropout; each real query's row sums to 1 over the
  keys it may attend to and is 0 elsewhere.
  """
  mask = _combined_mask(query, mask, causal, segment_ids)
  context, weights = _explicit_attention(query, key, value, mask, dropout_rate, seed)
  if query_mask is not None:
    weights = ops.where(query_mask, weights, 0.0)
  return context, weights


def _combined_mask(query, mask, causal, segment_ids):
  """The one bool mask of the explicit path (None when nothing is masked)."""
  extra = []
  if causal:
    extra.append(causal_mask(ops.shape(query)[1]))
  if segment_ids is not None:
    extra.append(segment_mask(*segment_ids))
  for part in extra:
    mask = part if mask is None else ops.logical_and(mask, part)
  return mask


def _explicit_attention(query, key, value, mask, dropout_rate, seed):
  """-> (context [b, t, h, d_v], float32 weights [b, h, t, s] before dropout)."""
  one_query = query.shape[1] == 1  # Incremental decoding: one position per step.
  # The query scaled before the product, in its dtype, as tensor2tensor's multihead_attention
  # does (exact for d_k a power of 4: 64 in the base and big shapes). Scaling the product instead
  # let oneDNN fuse the multiply into a float32 batched matmul wherever the step's shapes are
  # static, which made the Multi30k model's float32 step on one fixed shape 1.2-1.4x slower;
  # bucketed steps, traced with unknown lengths, are not fused and ran the same (bench/README.md,
  # "An AMX host").
  query = query * ops.cast(query.shape[-1] ** -0.5, query.dtype)
  if one_query:
    # Multiply-and-reduce instead of B*h batched [1, d] x [d, S] matmuls, which
    # XLA's CPU backend runs as thousands of tiny calls (bench/decode_speed.py).
    logits = ops.sum(query * key, axis=-1)  # [B, S, h]
    logits = ops.expand_dims(ops.transpose(logits, [0, 2, 1]), 2)  # [B, h, 1, S]
  else:
    logits = ops.einsum("bthd,bshd->bhts", query, key)  # [B, h, T, S]
  logits = ops.cast(logits, "float32")
  if mask is not None:
    logits = logits + ops.where(mask, 0.0, NEG_INF)  # Illegal positions -> -1e9 (Section 3.2.3).
  if logits.shape[-1] == 1:  # One key: weight 1 (keras.ops.softmax warns on a size-1 axis).
    weights = ops.ones_like(logits)
  else:
    weights = ops.softmax(logits, axis=-1)
  attended = weights
  if dropout_rate > 0.0:
    keep = _keep_mask(weights, dropout_rate, seed)
    attended = ops.where(keep, weights / (1.0 - dropout_rate), 0.0)
  attended = ops.cast(attended, value.dtype)
  if one_query:
    per_position = ops.expand_dims(ops.transpose(attended[:, :, 0, :], [0, 2, 1]), -1)  # [B, S, h, 1]
    return ops.sum(per_position * value, axis=1, keepdims=True), weights  # [B, 1, h, d_v]
  return ops.einsum("bhts,bshd->bthd", attended, value), weights  # [B, T, h, d_v]


def _keep_mask(weights, rate, seed):
  """Attention dropout's keep mask, a pure function of `seed`, shaped as `weights`.

  Under TensorFlow, the 16-bit draws of t2tlite/layers/dropout.py (the rate exact
  to 2^-16, half the random bits); `seed` is then a SeedGenerator, an int, or a
  [2] seed tensor (what a SeedGenerator draws inside a compiled step). Other
  backends draw keras.random's float32 uniforms, which take any of those seeds.
  """
  if keras.config.backend() != "tensorflow":
    return keras.random.uniform(ops.shape(weights), seed=seed) >= rate
  if isinstance(seed, keras.random.SeedGenerator):
    seed = seed.next()
  elif isinstance(seed, int):
    seed = ops.convert_to_tensor([seed, 0], "int32")
  return keep_mask(weights, rate, seed)


class MultiHeadAttention(keras.layers.Layer):
  """Multi-head attention with d_k and d_v independent of d_model / h.

  W^Q, W^K: d_model x (h * d_k); W^V: d_model x (h * d_v); W^O: (h * d_v) x d_model.
  `call` serves training and full forward passes; `call_with_attention_weights`
  also returns the weights; `project_key_value` and `attend` let the decoder
  cache keys/values (see layers/transformer_layers.py).
  """

  def __init__(self, num_heads, key_dim, value_dim, dropout=0.0, use_bias=False,
               kernel_initializer="glorot_uniform", flash_attention=False, **kwargs):
    super().__init__(**kwargs)
    self.num_heads = num_heads
    self.key_dim = key_dim
    self.value_dim = value_dim
    self.dropout = dropout
    self.use_bias = use_bias
    self.kernel_initializer = keras.initializers.get(kernel_initializer)
    self.flash_attention = flash_attention
    self.seed_generator = keras.random.SeedGenerator()

  def build(self, query_shape, value_shape=None):
    value_shape = query_shape if value_shape is None else value_shape
    output_dim = query_shape[-1]
    h = self.num_heads

    def dense(units, name):
      return keras.layers.Dense(
          units, use_bias=self.use_bias, kernel_initializer=self.kernel_initializer,
          dtype=self.dtype_policy, name=name)

    self.query_dense = dense(h * self.key_dim, "query")
    self.key_dense = dense(h * self.key_dim, "key")
    self.value_dense = dense(h * self.value_dim, "value")
    self.output_dense = dense(output_dim, "output")
    self.query_dense.build(query_shape)
    self.key_dense.build(value_shape)
    self.value_dense.build(value_shape)
    self.output_dense.build(tuple(query_shape[:-1]) + (h * self.value_dim,))

  def _split_heads(self, x, depth):
    """[batch, length, heads * depth] -> [batch, length, heads, depth]."""
    shape = ops.shape(x)
    return ops.reshape(x, (shape[0], shape[1], self.num_heads, depth))

  def _merge_heads(self, context):
    """[batch, length, heads, d_v] -> [batch, length, heads * d_v]."""
    shape = ops.shape(context)
    return ops.reshape(context, (shape[0], shape[1], self.num_heads * self.value_dim))

  def project_query(self, query):
    return self._split_heads(self.query_dense(query), self.key_dim)

  def project_key_value(self, value):
    """[batch, length, d_model] -> keys [b, l, h, d_k] and values [b, l, h, d_v]."""
    key = self._split_heads(self.key_dense(value), self.key_dim)
    value = self._split_heads(self.value_dense(value), self.value_dim)
    return key, value

  def _dropout_args(self, training):
    rate = self.dropout if training else 0.0
    return rate, (self.seed_generator if rate > 0.0 else None)

  def attend(self, query, key, value, mask=None, training=False, causal=False):
    """Projected query [b, t, h, d_k] over cached/projected keys -> [b, t, d_model]."""
    rate, seed = self._dropout_args(training)
    context = scaled_dot_product_attention(query, key, value, mask, rate, seed, causal=causal,
                                           flash_attention=self.flash_attention)  # [b, t, h, d_v]
    return self.output_dense(self._merge_heads(context))

  def attend_grouped(self, query, key, value, mask=None):
    """One query per row, rows grouped by sentence, over per-sentence keys (inference).

    query [b * k, 1, h, d_k] where rows [i * k, (i + 1) * k) belong to sentence
    i (the k beams of beam search); key/value [b, s, h, d] and mask [b, 1, 1, s]
    are per sentence, so encoder-decoder attention reads the memory once per
    sentence instead of once per beam: the k queries of a sentence attend
    together as a length-k query block. Returns [b * k, 1, d_model].
    """
    batch = key.shape[0] or ops.shape(key)[0]
    grouped = ops.reshape(query, (batch, -1, self.num_heads, self.key_dim))  # [b, k, h, d_k]
    context = scaled_dot_product_attention(grouped, key, value, mask,
                                           flash_attention=self.flash_attention)  # [b, k, h, d_v]
    context = ops.reshape(context, (-1, 1, self.num_heads * self.value_dim))
    return self.output_dense(context)

  def call(self, query, value=None, attention_mask=None, causal=False, training=None):
    """query [b, t, d_model], value [b, s, d_model] (default: query) -> [b, t, d_model].

    `attention_mask` is bool broadcastable to [b, h, t, s]; `causal` adds the
    look-ahead mask of decoder self-attention.
    """
    value = query if value is None else value
    key, value = self.project_key_value(value)
    return self.attend(self.project_query(query), key, value, attention_mask, bool(training),
                       causal=causal)

  def call_with_attention_weights(self, query, value=None, attention_mask=None, causal=False,
                                  query_mask=None, training=None):
    """Like `call`, returning (output [b, t, d_model], weights [b, h, t, s] float32).

    The output is exactly `call`'s (the same attention call, fused where
    `call` is fused), so a forward pass that collects weights gives the
    ordinary forward pass's numbers bit for bit; the weights come from the
    explicit path (`attention_with_weights`) over the same projected queries
    and keys, whose context agrees with the fused one to float rounding
    (tests/test_attention_paths.py). That costs one more Q K^T per layer, on
    inspection only. Rows of padded queries (False in `query_mask`, bool
    [b, t]) are zero. A method of its own rather than a flag of `call`, so
    that `call` has one return type.
    """
    value = query if value is None else value
    key, value = self.project_key_value(value)
    query = self.project_query(query)
    if query_mask is not None:
      query_mask = query_mask[:, None, :, None]
    _, weights = attention_with_weights(query, key, value, attention_mask, causal=causal,
                                        query_mask=query_mask)
    output = self.attend(query, key, value, attention_mask, bool(training), causal=causal)
    return output, weights

  def compute_output_shape(self, query_shape, value_shape=None):
    return query_shape

  def get_config(self):
    config = super().get_config()
    config.update(
        num_heads=self.num_heads, key_dim=self.key_dim, value_dim=self.value_dim,
        dropout=self.dropout, use_bias=self.use_bias, flash_attention=self.flash_attention,
        kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
    return config
