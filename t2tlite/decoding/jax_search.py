"""Beam search under JAX: decoding where TensorFlow is not installed (GPU machines with JAX only).

search.py's beam search is a `tf.while_loop`; a machine with JAX and no
TensorFlow (where the JAX trainer runs, t2tlite/training/jax_step.py) could
train a model but not decode it, and moving a base-size run's checkpoints to
another machine to decode costs gigabytes. This is the same search in
`jax.numpy`, one `jax.lax.while_loop`, compiled whole by `jax.jit`:
the same hypotheses, scores, length penalty, forced EOS and exact early
stopping as search.beam_search (read its docstring for the rules; this one
keeps its names), so dev BLEU measured here and there is the same measure.
tests/test_jax_search.py checks the two return the same beams, on toy models
and on the Transformer with one set of weights.

Token constraints work as in search.py (its "Candidate lists": a constraint
with `candidates` has its listed tokens ranked, one with only `mask` the whole
vocabulary masked); tree_constraint.TreeConstraint is written in keras.ops, so
parsing's constrained search runs here too. Not here: sampling; beam_size=1 is
a one-beam beam search.

`JaxDecoder(model, hparams).decode_nbest(sources)` is the Decoder's
`decode_nbest` for a Keras model on the JAX backend: the Decoder's batches
(batching.length_batches), the model's cached incremental step, the weights
passed to the compiled search as arguments (keras.StatelessScope), not baked
in as constants.
"""

import time
import typing
from typing import List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from t2tlite.constants import EOS_ID, NEG_INF, PAD_ID
from t2tlite.decoding import batching
from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.errors import UserError

_SORT_MIN = float("-inf")
# One loop for translation's input + 50 (the Decoder's 64 makes two): on an accelerator a step over
# 128 positions costs about what one over 64 does, and one loop compiles in half the time.
FIRST_HORIZON = 128


class SearchResult(typing.NamedTuple):
  """As search.SearchResult: ids [batch, beam, decode_length + 1], scores, lengths, steps."""
  ids: jax.Array
  scores: jax.Array
  lengths: jax.Array
  steps: jax.Array


class _BeamState(typing.NamedTuple):
  """search._BeamState: the loop's variables, same meaning."""
  step: jax.Array
  alive_seq: jax.Array
  alive_log_probs: jax.Array
  alive_valid: jax.Array
  model_state: typing.Any
  constraint_state: typing.Any
  finished_seq: jax.Array
  finished_scores: jax.Array
  finished_lengths: jax.Array
  finished_valid: jax.Array
  done: jax.Array


def length_penalty(length, alpha):
  """GNMT length penalty ((5 + length) / 6) ** alpha, float32."""
  return jnp.power((5.0 + jnp.asarray(length, jnp.float32)) / 6.0, jnp.float32(alpha))


def tile_to_beams(nested, beam_size):
  """[batch, ...] -> [batch * beam, ...], copies of a sentence adjacent (search.tile_to_beams)."""
  return jax.tree_util.tree_map(lambda t: jnp.repeat(t, beam_size, axis=0), nested)


def gather_rows(state, rows):
  """Every array [n, ...] of `state` gathered at rows [n] (search.gather_rows)."""
  return jax.tree_util.tree_map(lambda t: jnp.take(t, rows, axis=0), state)


def _gather_beams(nested, indices):
  """[batch, n, ...] gathered at indices [batch, k] -> [batch, k, ...]."""
  def gather(t):
    index = indices.reshape(indices.shape + (1,) * (t.ndim - 2))
    return jnp.take_along_axis(t, index, axis=1)
  return jax.tree_util.tree_map(gather, nested)


def _top_k_indices(scores, valid, k):
  """Indices [batch, k] of the k best valid entries, best first; ties to the lower index."""
  return jax.lax.top_k(jnp.where(valid, scores, _SORT_MIN), k)[1]


def _write_position(sequences, position, tokens):
  at_position = jnp.arange(sequences.shape[-1]) == position
  return jnp.where(at_position, tokens[..., None], sequences)


def _is_done(s, max_lengths, alpha):
  """search._is_done: no better finished hypothesis can appear."""
  best_penalty = jnp.maximum(length_penalty(s.step + 2, alpha),
                             length_penalty(max_lengths + 1, alpha))
  reachable = s.alive_log_probs / best_penalty[:, None]
  best_reachable = jnp.max(jnp.where(s.alive_valid, reachable, _SORT_MIN), axis=1)
  worst_finished = jnp.min(s.finished_scores, axis=1)
  full = jnp.all(s.finished_valid, axis=1)
  none_alive = ~jnp.any(s.alive_valid, axis=1)
  return s.done | none_alive | (full & (worst_finished > best_reachable))


def beam_search(symbols_to_logits_fn, initial_ids, initial_state, beam_size: int, alpha,
                max_lengths, decode_length: int, eos_id: int = EOS_ID,
                reorder_state=gather_rows, constraint=None, constraint_state=()) -> SearchResult:
  """search.beam_search in jax.numpy (same arguments); traceable by jax.jit."""
  max_lengths = jnp.clip(jnp.asarray(max_lengths, jnp.int32), 0, decode_length)
  batch, width = initial_ids.shape[0], decode_length + 2
  start = jnp.repeat(jnp.asarray(initial_ids, jnp.int32)[:, None], beam_size, axis=1)
  alive_valid = jnp.tile((jnp.arange(beam_size) == 0)[None], (batch, 1))
  initial = _BeamState(
      step=jnp.int32(0),
      alive_seq=_write_position(jnp.zeros((batch, beam_size, width), jnp.int32), 0, start),
      alive_log_probs=jnp.where(alive_valid, 0.0, NEG_INF).astype(jnp.float32),
      alive_valid=alive_valid,
      model_state=tile_to_beams(initial_state, beam_size),
      constraint_state=tile_to_beams(constraint_state if constraint is not None else (),
                                     beam_size),
      finished_seq=jnp.zeros((batch, beam_size, width), jnp.int32),
      finished_scores=jnp.full((batch, beam_size), NEG_INF, jnp.float32),
      finished_lengths=jnp.zeros((batch, beam_size), jnp.int32),
      finished_valid=jnp.zeros((batch, beam_size), bool),
      done=jnp.zeros((batch,), bool))
  batch_offsets = (jnp.arange(batch) * beam_size)[:, None]
  listed = hasattr(constraint, "candidates")

  def body(s):
    ids = s.alive_seq[:, :, s.step].reshape(-1)
    logits, new_model_state = symbols_to_logits_fn(ids, s.step, s.model_state)
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [rows, vocab]
    allowed = None
    if listed:  # Rank the listed tokens only (search.py, "Candidate lists").
      tokens, allowed = constraint.candidates(s.constraint_state)  # [rows, C]
      log_probs = jnp.take_along_axis(log_probs, tokens, axis=1)
      tokens = tokens.reshape(batch, beam_size, -1)
      allowed = allowed.reshape(batch, beam_size, -1)
    else:
      tokens = jnp.arange(log_probs.shape[-1])[None, None]  # [1, 1, vocab]
      if constraint is not None:
        allowed = constraint.mask(s.constraint_state).reshape(batch, beam_size, -1)
    width = log_probs.shape[-1]
    log_probs = log_probs.reshape(batch, beam_size, width)
    forced = (s.step >= max_lengths)[:, None, None]
    valid = s.alive_valid[:, :, None] & ~s.done[:, None, None] & ((tokens == eos_id) | ~forced)
    if allowed is not None:
      valid = valid & allowed
    extended = jnp.where(valid, s.alive_log_probs[:, :, None] + log_probs, NEG_INF)
    flat_log_probs, flat_valid = extended.reshape(batch, -1), valid.reshape(batch, -1)

    top = _top_k_indices(flat_log_probs, flat_valid, 2 * beam_size)
    top_log_probs, top_valid = _gather_beams((flat_log_probs, flat_valid), top)
    top_parent = top // width
    if listed:
      top_token = jnp.take_along_axis(tokens.reshape(batch, -1), top, axis=1)
    else:
      top_token = top % width
    top_seq = _write_position(_gather_beams(s.alive_seq, top_parent), s.step + 1, top_token)
    top_eos = top_token == eos_id

    alive_valid_top = top_valid & ~top_eos
    keep = _top_k_indices(top_log_probs, alive_valid_top, beam_size)
    alive_seq, alive_log_probs, alive_valid, alive_parent, alive_token = _gather_beams(
        (top_seq, top_log_probs, alive_valid_top, top_parent, top_token), keep)
    parent_rows = (alive_parent + batch_offsets).reshape(-1)
    model_state = reorder_state(new_model_state, parent_rows)
    constraint_state = s.constraint_state
    if constraint is not None:
      constraint_state = constraint.update(gather_rows(constraint_state, parent_rows),
                                           alive_token.reshape(-1))

    new_length = s.step + 1
    new_scores = top_log_probs / length_penalty(new_length, alpha)
    seq = jnp.concatenate([s.finished_seq, top_seq], axis=1)
    scores = jnp.concatenate([s.finished_scores, new_scores], axis=1)
    lengths = jnp.concatenate([s.finished_lengths, jnp.zeros_like(top) + new_length], axis=1)
    valid = jnp.concatenate([s.finished_valid, top_valid & top_eos], axis=1)
    best = _top_k_indices(scores, valid, beam_size)
    finished_seq, finished_scores, finished_lengths, finished_valid = _gather_beams(
        (seq, scores, lengths, valid), best)
    s = _BeamState(
        step=new_length, alive_seq=alive_seq,
        alive_log_probs=jnp.where(alive_valid, alive_log_probs, NEG_INF),
        alive_valid=alive_valid, model_state=model_state, constraint_state=constraint_state,
        finished_seq=finished_seq,
        finished_scores=jnp.where(finished_valid, finished_scores, NEG_INF),
        finished_lengths=finished_lengths, finished_valid=finished_valid, done=s.done)
    return s._replace(done=_is_done(s, max_lengths, alpha))

  s = jax.lax.while_loop(lambda s: (s.step < decode_length + 1) & ~jnp.all(s.done), body,
                         initial)
  valid = s.finished_valid
  return SearchResult(ids=jnp.where(valid[:, :, None], s.finished_seq[:, :, 1:], 0),
                      scores=jnp.where(valid, s.finished_scores, NEG_INF),
                      lengths=jnp.where(valid, s.finished_lengths, 0), steps=s.step)


class JaxDecoder:
  """Decoder.decode_nbest for a Keras Transformer on the JAX backend (beam search only)."""

  def __init__(self, model, hparams: DecodeHParams = DecodeHParams(), constraint=None):
    if hparams.sampling_method != "argmax" or not hparams.use_cache:
      raise UserError("--decode_hparams: the JAX search has no sampling or uncached step; "
                      "decode with t2t-decoder where TensorFlow is installed")
    if hparams.constrain_trees and constraint is None:
      raise UserError("--decode_hparams: constrain_trees=true needs the problem's tree "
                      "constraint (tree_constraint.TreeConstraint) passed to JaxDecoder")
    # A token constraint (search.py's API), e.g. tree_constraint.TreeConstraint for parsing.
    self.model, self.hparams, self.constraint = model, hparams, constraint
    self._search = jax.jit(self._search_batch, static_argnums=(0,))
    self.shapes_seen = set()
    self.truncated = 0  # Sources cut to the input limit by the last decode call.
    self.first_shape_seconds = 0.0  # Batches that met a new shape: trace + compile + search.

  def _search_batch(self, decode_length, values, inputs, source_lengths):
    import keras
    model, hp = self.model, self.hparams
    with keras.StatelessScope(state_mapping=list(zip(model.variables, values))):
      memory, memory_mask = model.encode(inputs)
      state, context = model.initial_decode_state(memory, memory_mask, decode_length + 1)
      horizons = batching.doubling_horizons(decode_length + 1, FIRST_HORIZON)
      step_fn = lambda ids, step, st: model.decode_step(  # noqa: E731
          ids, step, st, context, horizons)
      max_lengths = source_lengths + hp.extra_length
      constrained = {}
      if self.constraint is not None:
        constrained = dict(constraint=self.constraint,
                           constraint_state=self.constraint.initial_state(inputs, max_lengths))
      return beam_search(step_fn, jnp.full(source_lengths.shape, PAD_ID, jnp.int32), state,
                         hp.beam_size, hp.alpha, max_lengths, decode_length, EOS_ID,
                         reorder_state=model.reorder_decode_state, **constrained)

  def decode_nbest(self, sources: Sequence[Sequence[int]]
                   ) -> List[List[Tuple[List[int], float]]]:
    """Source ids (without EOS) -> per source, the best `beams_written` (ids, score), best first.

    As Decoder.decode_nbest: the same batches, sources cut to the input limit (counted in
    `self.truncated`), empty sources give [], outputs in input order.
    """
    hp = self.hparams
    sources, self.truncated = batching.cut_sources(
        sources, batching.max_input_length(hp, self.model.hparams))
    outputs: List[List[Tuple[List[int], float]]] = [[] for _ in sources]
    values = [v.value for v in self.model.variables]
    for chosen, batch, lengths, new_shape in batching.plan(sources, hp, self.shapes_seen):
      start = time.perf_counter()
      result = self._search(batch.shape[1] + hp.extra_length, values, jnp.asarray(batch),
                            jnp.asarray(lengths))
      ids, scores = np.asarray(result.ids), np.asarray(result.scores)
      if new_shape:
        self.first_shape_seconds += time.perf_counter() - start
      for i, beams in zip(chosen, batching.nbest_rows(ids, scores, len(chosen),
                                                      hp.beams_written)):
        outputs[i] = beams
    return outputs

  def decode_ids(self, sources: Sequence[Sequence[int]]) -> List[List[int]]:
    """Source ids (without EOS) -> best target ids (without EOS), in input order."""
    return [beams[0][0] if beams else [] for beams in self.decode_nbest(sources)]
