"""The Transformer of Vaswani et al. 2017 as a Keras 3 functional model.

`Transformer` is a functional `keras.Model` subclass (the KerasHub backbone
pattern): its graph maps {"inputs": [b, s], "targets": [b, t]} int32 ids to
logits [b, t, vocab] under teacher forcing, in the layers' compute dtype
(bfloat16 under mixed_bfloat16: the loss casts them to float32 inside its
compiled cluster), with targets shifted right inside the graph (id 0 starts
every target, as in tensor2tensor). With `hparams.packed_batches` the graph
also takes PACKED_FEATURES (segment ids and per-pair positions of rows holding
several pairs, t2tlite/data/packing.py): attention stays within a pair and
positions restart with each pair. The same layers also serve incremental
decoding through `encode`, `initial_decode_state` and `decode_step`, which beam
search calls one position at a time; those return float32 logits.

Written in keras.ops and importing keras only, so the same model runs on
every Keras backend (tests/test_backends.py compares TensorFlow and JAX);
what needs TensorFlow (compiled steps, tf.data, distribution, beam search)
lives in t2tlite/training and t2tlite/decoding and imports this, never the
reverse.
"""

from typing import List, NamedTuple

import keras
from keras import ops

from t2tlite.constants import PAD_ID
from t2tlite.hparams_record import HParams, HParamsError
from t2tlite.layers.attention import packed_attention_masks, padding_mask
from t2tlite.layers.dropout import Dropout, SymbolDropout
from t2tlite.layers.embedding import (LearnedPositionEmbedding, SharedEmbedding,
                                      SinusoidalPositionEncoding)
from t2tlite.layers.transformer_layers import DecoderLayer, EncoderLayer
from t2tlite.registry import register_model


class AttentionWeights(NamedTuple):
  """Every layer's attention probabilities, each [b, heads, query, key] float32.

  Rows of padded queries are zero; padded keys and (decoder self-attention)
  future positions carry zero weight; every other row sums to 1.
  """
  encoder: List  # Encoder self-attention, per layer [b, h, s, s].
  decoder: List  # Decoder self-attention (causal), per layer [b, h, t, t].
  encoder_decoder: List  # Decoder queries over the encoder output, per layer [b, h, t, s].


def shift_right(targets):
  """[b, t] -> [b, t]: prepend PAD_ID (the start symbol), drop the last position."""
  return ops.pad(targets, [[0, 0], [1, 0]], constant_values=PAD_ID)[:, :-1]


# The features of a packed batch besides "inputs" and "targets" (tensor2tensor's names).
PACKED_FEATURES = ("inputs_segmentation", "inputs_position",
                   "targets_segmentation", "targets_position")


def shift_right_packed(targets, targets_position):
  """[b, t] -> [b, t]: shifted right per pair; each pair's first position reads PAD_ID.

  tensor2tensor shifts a packed row as one sequence, so a pair's first
  decoder input is the previous pair's EOS; here it is the start symbol, as
  when the pair is alone in its row, so packing changes no pair's loss.
  """
  return ops.where(ops.equal(targets_position, 0), PAD_ID, shift_right(targets))


@register_model("transformer")
class Transformer(keras.Model):
  """Encoder-decoder Transformer built from an HParams (see t2tlite/hparams_record.py)."""

  def __init__(self, hparams, **kwargs):
    hp = hparams if isinstance(hparams, HParams) else HParams.from_dict(hparams)
    if not hp.input_vocab_size or not hp.target_vocab_size:
      raise HParamsError("input_vocab_size and target_vocab_size must be set "
                         "(the problem sets them; --describe takes --vocab_size)")
    dtype = hp.dtype
    layer_args = dict(
        num_heads=hp.num_heads, key_dim=hp.key_dim, value_dim=hp.value_dim, d_ff=hp.d_ff,
        dropout=hp.dropout, attention_dropout=hp.attention_dropout,
        relu_dropout=hp.relu_dropout, layer_norm_position=hp.layer_norm_position,
        layer_norm_epsilon=hp.layer_norm_epsilon, activation=hp.ffn_activation,
        use_bias=hp.attention_use_bias, flash_attention=hp.flash_attention, dtype=dtype)

    # --- Layers ---
    target_embedding = SharedEmbedding(
        hp.target_vocab_size, hp.d_model, dtype=dtype,
        name="shared_embedding" if hp.shared_source_target_embedding else "target_embedding")
    source_embedding = (target_embedding if hp.shared_source_target_embedding else
                        SharedEmbedding(hp.input_vocab_size, hp.d_model, dtype=dtype,
                                        name="source_embedding"))
    if hp.shared_embedding_and_softmax_weights:
      projection = lambda x: target_embedding(x, reverse=True)
    else:
      projection = keras.layers.Dense(hp.target_vocab_size, use_bias=False, dtype=dtype,
                                      name="softmax")

    def positions(name):
      if hp.position_encoding == "learned":
        return LearnedPositionEmbedding(hp.max_position, dtype=dtype, name=name)
      return SinusoidalPositionEncoding(dtype=dtype, name=name)

    source_position = positions("source_position")
    target_position = positions("target_position")
    # Whole tokens dropped (t2t's symbol_dropout); no layer at 0, so models without it keep
    # their variables and checkpoints.
    source_symbols = target_symbols = None
    if hp.symbol_dropout:
      source_symbols = SymbolDropout(hp.symbol_dropout, name="source_symbol_dropout")
      target_symbols = SymbolDropout(hp.symbol_dropout, name="target_symbol_dropout")
    source_dropout = Dropout(hp.dropout, dtype=dtype, name="source_dropout")
    target_dropout = Dropout(hp.dropout, dtype=dtype, name="target_dropout")
    encoder_layers = [EncoderLayer(name=f"encoder_layer_{i}", **layer_args)
                      for i in range(hp.num_encoder_layers)]
    decoder_layers = [DecoderLayer(name=f"decoder_layer_{i}", **layer_args)
                      for i in range(hp.num_decoder_layers)]
    prenorm = hp.layer_norm_position == "pre"

    def final_norm(name):  # Pre-norm stacks end un-normalized; t2t adds one LN.
      return (keras.layers.LayerNormalization(epsilon=hp.layer_norm_epsilon, dtype=dtype,
                                              name=name) if prenorm else None)

    encoder_norm = final_norm("encoder_norm")
    decoder_norm = final_norm("decoder_norm")

    # --- Functional graph (teacher forcing) ---
    inputs = keras.Input(shape=(None,), dtype="int32", name="inputs")
    targets = keras.Input(shape=(None,), dtype="int32", name="targets")
    features = {"inputs": inputs, "targets": targets}
    source_ids = source_symbols(inputs) if source_symbols else inputs
    if hp.packed_batches:  # Several pairs per row: segment ids and per-pair positions.
      features.update({name: keras.Input(shape=(None,), dtype="int32", name=name)
                       for name in PACKED_FEATURES})
      encoder_mask, decoder_mask, memory_mask = packed_attention_masks(
          features["inputs_segmentation"], features["targets_segmentation"])
      source_positions = features["inputs_position"]
      target_positions = features["targets_position"]
      decoder_inputs = shift_right_packed(targets, target_positions)
    else:  # Dropped source symbols are padding here too, as in t2t (SymbolDropout).
      memory_mask = padding_mask(source_ids, PAD_ID)  # [b, 1, 1, s] bool
      encoder_mask, decoder_mask = memory_mask, None
      source_positions = target_positions = None
      decoder_inputs = shift_right(targets)
    if target_symbols:
      decoder_inputs = target_symbols(decoder_inputs)
    x = source_dropout(source_position(source_embedding(source_ids), positions=source_positions))
    for layer in encoder_layers:
      x = layer(x, padding_mask=encoder_mask)
    memory = encoder_norm(x) if prenorm else x
    y = target_dropout(target_position(target_embedding(decoder_inputs),
                                       positions=target_positions))
    for layer in decoder_layers:
      y = layer(y, memory, memory_mask=memory_mask, self_attention_mask=decoder_mask)
    if prenorm:
      y = decoder_norm(y)
    logits = projection(y)
    super().__init__(inputs=features, outputs=logits, **kwargs)

    self.hparams = hp
    self.source_embedding = source_embedding
    self.target_embedding = target_embedding
    self.source_position = source_position
    self.target_position = target_position
    self.encoder_layers = encoder_layers
    self.decoder_layers = decoder_layers
    self.encoder_norm = encoder_norm
    self.decoder_norm = decoder_norm
    # Decoding and the attention views return float32 logits per position, as before;
    # only the teacher-forced graph leaves the [b, t, vocab] cast to the loss.
    self._float32_logits = lambda x: ops.cast(projection(x), "float32")

  # --- Looking inside: the attention weights (never on the training or decoding path) ---
  def call_with_attention_weights(self, inputs, targets):
    """The teacher-forced forward pass (no dropout), also returning every attention's weights.

    inputs [b, s] and targets [b, t] int32 ids (EOS-terminated, PAD_ID-padded,
    as in training) -> (logits [b, t, vocab] float32, AttentionWeights), the
    weights per layer, [layer][b, heads, query, key] float32. Decoder query
    position i reads targets[i - 1] (shifted right) and predicts targets[i], so
    decoder rows are labelled with the targets. Every attention goes through
    the explicit path (`attention_with_weights`), so the functional graph the
    trainer compiles is untouched; tests check the logits equal it.
    """
    source_real = ops.not_equal(inputs, PAD_ID)  # [b, s]
    target_real = ops.not_equal(targets, PAD_ID)  # [b, t]
    memory_mask = padding_mask(inputs, PAD_ID)
    x = self.source_position(self.source_embedding(inputs))
    encoder = []
    for layer in self.encoder_layers:
      x, w = layer.call_with_attention_weights(x, memory_mask, source_real)
      encoder.append(w)
    memory = x if self.encoder_norm is None else self.encoder_norm(x)
    y = self.target_position(self.target_embedding(shift_right(targets)))
    decoder, cross = [], []
    for layer in self.decoder_layers:
      y, w_self, w_cross = layer.call_with_attention_weights(y, memory, memory_mask, target_real)
      decoder.append(w_self)
      cross.append(w_cross)
    if self.decoder_norm is not None:
      y = self.decoder_norm(y)
    return self._float32_logits(y), AttentionWeights(encoder, decoder, cross)

  # --- Incremental decoding ---
  def encode(self, inputs):
    """[b, s] ids -> (memory [b, s, d_model], memory_mask [b, 1, 1, s] bool); no dropout."""
    memory_mask = padding_mask(inputs, PAD_ID)
    x = self.source_position(self.source_embedding(inputs))
    for layer in self.encoder_layers:
      x = layer(x, padding_mask=memory_mask, training=False)
    if self.encoder_norm is not None:
      x = self.encoder_norm(x)
    return x, memory_mask

  def initial_decode_state(self, memory, memory_mask, max_length):
    """Decoder caches for up to `max_length` positions.

    Returns (state, context). `state` has leading dim = rows (one per
    hypothesis; beam search tiles it) and must follow the beams through
    `reorder_decode_state`, never a plain gather:
      {"layer_i": {"key": [b, L, h, d_k], "value": [b, L, h, d_v]},
       "history_rows": int32 [b, L]}
    The caches are append-only (row r writes position `step` only);
    history_rows[r, p] is the row whose cache holds position p of row r's
    hypothesis. `context` stays per sentence, whatever the number of rows per
    sentence: the cross-attention keys/values, computed once here, and the
    memory mask.
    """
    batch = ops.shape(memory)[0]
    hp = self.hparams
    # The layers' policy (hp.dtype), not the outer Model's (float32): under
    # mixed_bfloat16 the keys and values written into the cache are bfloat16.
    dtype = keras.DTypePolicy(hp.dtype).compute_dtype
    state = {
        f"layer_{i}": {
            "key": ops.zeros((batch, max_length, hp.num_heads, hp.key_dim), dtype),
            "value": ops.zeros((batch, max_length, hp.num_heads, hp.value_dim), dtype),
        } for i in range(len(self.decoder_layers))
    }
    state["history_rows"] = ops.zeros((batch, max_length), "int32")  # Set as decoding goes.
    context = {
        "memory_kv": [layer.memory_key_values(memory) for layer in self.decoder_layers],
        "memory_mask": memory_mask,
    }
    return state, context

  def decode_step(self, ids, step, state, context, horizons=None):
    """ids [r] at position `step` (int32 scalar) -> (logits [r, vocab] float32, new state).

    r = sentences x hypotheses per sentence, rows grouped by sentence (the
    layout of `search.tile_to_beams`); `context` is per sentence. `horizons`
    (increasing static ints, `batching.doubling_horizons`; None: the whole
    cache): self-attention at `step` reads the first H positions only, H the
    first horizon past `step`, so a step costs O(step), not O(cache length)
    (`DecoderLayer.call_cached`).
    """
    history_rows = state["history_rows"]
    rows = ops.arange(ops.shape(history_rows)[0], dtype="int32")
    max_length = history_rows.shape[1] or ops.shape(history_rows)[1]
    positions = ops.arange(max_length, dtype="int32")
    # Positions before `step` come from the ancestors; `step` and after from the row itself.
    history_rows = ops.where(positions[None] < step, history_rows, rows[:, None])
    history_index = history_rows * max_length + positions[None]  # Into [r * L] caches.
    y = self.target_embedding(ids[:, None])  # [r, 1, d_model]
    y = self.target_position(y, start_index=step)
    new_state = {"history_rows": history_rows}
    for i, layer in enumerate(self.decoder_layers):
      y, new_state[f"layer_{i}"] = layer.call_cached(
          y, step, state[f"layer_{i}"], history_index, context["memory_kv"][i],
          context["memory_mask"], horizons)
    if self.decoder_norm is not None:
      y = self.decoder_norm(y)
    return self._float32_logits(y)[:, 0], new_state

  @staticmethod
  def reorder_decode_state(state, parent_rows):
    """The state of hypotheses whose parents are rows `parent_rows` (int32 [r]).

    Only the small history table moves; the caches stay where they were
    written, which is what makes a beam-search step cheap.
    """
    return dict(state, history_rows=ops.take(state["history_rows"], parent_rows, axis=0))

  # --- Decoding without a cache (the reference the cache must equal; a speed baseline) ---
  def initial_uncached_state(self, memory, memory_mask, max_length):
    """Like `initial_decode_state`, but the state is only the ids decoded so far [b, L]."""
    batch = ops.shape(memory)[0]
    state = {"ids": ops.zeros((batch, max_length), "int32")}
    return state, {"memory": memory, "memory_mask": memory_mask}

  def decode_step_uncached(self, ids, step, state, context, horizons=None):
    """Same contract as `decode_step`, recomputing the whole decoder over all positions.

    Position `step` gets `ids`, later positions still hold padding, which the
    causal mask hides from position `step`, so its logits equal the cached ones.
    Costs O(L) decoder passes of length L: what a decoder without a cache does
    (`horizons` is accepted and ignored: the baseline recomputes everything).
    """
    history = state["ids"]
    at_step = ops.equal(ops.arange(ops.shape(history)[1], dtype="int32"), step)[None, :]
    history = ops.where(at_step, ids[:, None], history)
    y = self.target_position(self.target_embedding(history))
    for layer in self.decoder_layers:
      y = layer(y, context["memory"], memory_mask=context["memory_mask"], training=False)
    if self.decoder_norm is not None:
      y = self.decoder_norm(y)
    y = ops.take(y, ops.reshape(step, (1,)), axis=1)  # [b, 1, d]
    return self._float32_logits(y)[:, 0], {"ids": history}

  def get_config(self):
    return {"hparams": self.hparams.to_dict(), "name": self.name}

  @classmethod
  def from_config(cls, config):
    return cls(**config)
