"""Batched decoding of id sequences with a trained model (text: decoding/pipeline.py).

Sources are sorted by length and cut into batches, each padded to a multiple
of `length_multiple` so the XLA-compiled search is compiled for few shapes;
results are written back in input order. Each sentence may generate up to
its own length + extra_length tokens (Section 6.1), its encoder output is
computed once, and its cross-attention keys/values once per sentence inside
`Transformer.initial_decode_state`. On a CPU, batches are searched concurrently,
one thread each (`DecodeHParams.concurrent_batches`): XLA runs a search of small
ops mostly on one thread, so a second search finds a core's worth of work where
the step is not bound by memory bandwidth (translation 1.13-1.15x; the beam-21
parsing step is, and gains nothing).
"""

import concurrent.futures
import os
import time
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from t2tlite import xla_choice
from t2tlite.constants import EOS_ID, PAD_ID
from t2tlite.decoding import batching, sampling, search
from t2tlite.decoding.batching import doubling_horizons, length_batches, padded_width
from t2tlite.decoding.decode_hparams import DecodeHParams


class Decoder:
  """Turns source id lists into target id lists with beam or greedy search (or sampling)."""

  # The cached step's first horizon (batching.doubling_horizons): translation's
  # input + 50 mostly fits in the first; parsing's input + 300 reaches the third or fourth.
  first_horizon = 64

  def __init__(self, model, decode_hparams: DecodeHParams = DecodeHParams(), constraint=None):
    self.model = model
    self.hparams = decode_hparams
    # A token constraint (search.py), e.g. tree_constraint.TreeConstraint for parsing.
    self.constraint = constraint
    if decode_hparams.use_cache:
      self._initial_state, self._step = model.initial_decode_state, model.decode_step
      self._reorder = model.reorder_decode_state
    else:
      self._initial_state = model.initial_uncached_state
      self._step = model.decode_step_uncached
      self._reorder = search.gather_rows
    # The one compiled search over ids: every decode path (files, dev decoding, export) runs it.
    # Without AutoGraph: the search's loops are tf.while_loops and nothing branches on a
    # tensor, so AutoGraph would only rewrite the source of every function it reaches
    # (the beam-21 parsing search traced in 10.4 s with it, 3.4 s without).
    self.search_ids = tf.function(self._search_batch, autograph=False,
                                  jit_compile=xla_choice.decode_xla(model.hparams, decode_hparams.xla),
                                  reduce_retracing=False)
    self.truncated = 0  # Sources cut to max_input_length by the last decode call.
    self.shapes_seen = set()  # Distinct batch shapes decoded: each one is a trace (and an XLA compile).
    # Wall time of the batches that met a new shape: its trace and compile plus that batch's
    # search. What is left of a decode's time is the search alone (t2t-decoder logs both).
    self.first_shape_seconds = 0.0
    self.last_steps = []  # Loop steps the search ran, per batch of the last decode call.

  def _search_batch(self, inputs, source_lengths, alphas=None):
    """inputs int32 [b, s] (EOS-terminated, padded); source_lengths [b] without EOS.

    Returns search.SearchResult: ids [b, beam, s + extra_length + 1], scores [b, beam].
    Each sentence may generate source_lengths[b] + extra_length tokens. `alphas` (a
    tuple, beam search only): one search for every alpha, ids [b, alphas, beam, ...].
    """
    hp = self.hparams
    # Static where the batch's padded width is (files, dev decoding); a tensor in the
    # exported search, whose width is only known per request (XLA still compiles per shape).
    width = inputs.shape[1] if inputs.shape[1] is not None else tf.shape(inputs)[1]
    decode_length = width + hp.extra_length
    memory, memory_mask = self.model.encode(inputs)
    state, context = self._initial_state(memory, memory_mask, decode_length + 1)
    max_lengths = source_lengths + hp.extra_length
    start = tf.fill(tf.shape(source_lengths), PAD_ID)
    constrained = {}
    if self.constraint is not None:
      constrained = dict(constraint=self.constraint,
                         constraint_state=self.constraint.initial_state(inputs, max_lengths))
    # The cached step attends over the positions < H only, H the first horizon past the
    # step (Transformer.decode_step). An exported search knows its width only per request:
    # it gets the horizons of the longest width max_input_length allows.
    horizons = None
    if hp.use_cache:
      if isinstance(decode_length, int):
        horizons = doubling_horizons(decode_length + 1, self.first_horizon)
      elif self.max_input_length:
        longest = padded_width(self.max_input_length + 1, hp.length_multiple) + hp.extra_length
        horizons = doubling_horizons(longest + 1, self.first_horizon)
    if not hp.use_cache and hp.beam_size > 1:  # The cached step reads its context per sentence.
      context = search.tile_to_beams(context, hp.beam_size)
    step_fn = lambda ids, step, st: self._step(ids, step, st, context, horizons)
    if hp.beam_size == 1:
      choice = {}
      if hp.samples:  # Each sentence's draws depend on its own ids and the seed only.
        keys = sampling.source_keys(inputs, source_lengths, hp.sampling_seed)
        choice = dict(choose=sampling.Sampler(hp.sampling_temp, hp.sampling_topk, keys))
      return search.greedy_search(step_fn, start, state, max_lengths, decode_length, EOS_ID,
                                  **constrained, **choice)
    alpha = list(alphas) if alphas else hp.alpha
    return search.beam_search(step_fn, start, state, hp.beam_size, alpha, max_lengths,
                              decode_length, EOS_ID, reorder_state=self._reorder, **constrained)

  @property
  def max_input_length(self) -> int:
    """Longest source, in tokens without EOS; 0 means no limit."""
    return batching.max_input_length(self.hparams, self.model.hparams)

  def batches(self, lengths: Sequence[int]) -> List[List[int]]:
    """Indices of non-empty sources, sorted by length, cut under the token budget."""
    return length_batches(lengths, self.hparams)

  def decode_nbest(self, sources: Sequence[Sequence[int]],
                   progress: Optional[Callable[[int], object]] = None
                   ) -> List[List[Tuple[List[int], float]]]:
    """Source ids (without EOS) -> per source, the best `beams_written` (ids, score), best first.

    Empty sources give []. Sources longer than `max_input_length` are cut
    (counted in `self.truncated`). Outputs are in input order. `progress(done)`
    is called after each batch with the number of sources decoded so far
    (empty ones count as done from the start), e.g. `t2tlite.progress.Progress.update`.
    """
    return self._decode(sources, progress, None)[0]

  def decode_nbest_per_alpha(self, sources: Sequence[Sequence[int]], alphas: Sequence[float],
                             progress: Optional[Callable[[int], object]] = None
                             ) -> List[List[List[Tuple[List[int], float]]]]:
    """`decode_nbest` at each of `alphas` (the hparams' alpha is ignored): one list per alpha.

    Each batch is searched once for all of them (search.py, "Several alphas in one
    search"), and each alpha's outputs are those of a decode with that alpha alone.
    Greedy search (beam_size 1) has no length penalty: one decode serves every alpha.
    """
    alphas = tuple(float(alpha) for alpha in alphas)
    if not alphas:
      raise ValueError("alphas: give at least one")
    if self.hparams.beam_size == 1:
      return self._decode(sources, progress, None) * len(alphas)
    return self._decode(sources, progress, alphas)

  def _decode(self, sources, progress, alphas):
    """Per alpha (one entry when alphas is None: the hparams' own), the outputs in input order."""
    hp = self.hparams
    sources, self.truncated = batching.cut_sources(sources, self.max_input_length)
    outputs: List[List[List[Tuple[List[int], float]]]] = [
        [[] for _ in sources] for _ in (alphas or (None,))]
    done = sum(1 for s in sources if not s)
    planned = self._plan(sources)
    self.last_steps = [0] * len(planned)

    def search(index):
      _, batch, lengths, _ = planned[index]
      start = time.perf_counter()
      args = (tf.constant(batch), tf.constant(lengths))
      # One alpha calls the search as every other path does (export, wrappers): two arguments.
      result = self.search_ids(*args) if alphas is None else self.search_ids(*args, alphas)
      ids, scores = result.ids.numpy(), result.scores.numpy()
      if alphas is None:  # One alpha: [b, beam, ...] -> [b, 1, beam, ...].
        ids, scores = ids[:, np.newaxis], scores[:, np.newaxis]
      return index, ids, scores, int(result.steps), time.perf_counter() - start

    workers = min(self.concurrent_batches(), len(planned)) or 1
    # Longest sources first: the batch that runs the most loop steps starts at once, and
    # the shorter ones fill the other workers around it.
    order = range(len(planned) - 1, -1, -1) if workers > 1 else range(len(planned))
    pool = concurrent.futures.ThreadPoolExecutor(workers)
    try:
      running = [pool.submit(search, index) for index in order]
      for future in concurrent.futures.as_completed(running):
        index, ids, scores, steps, seconds = future.result()
        chosen, _, _, new_shape = planned[index]
        if new_shape:
          self.first_shape_seconds += seconds
        self.last_steps[index] = steps
        for a, per_alpha in enumerate(outputs):
          for i, beams in zip(chosen, batching.nbest_rows(ids[:, a], scores[:, a], len(chosen),
                                                          hp.beams_written)):
            per_alpha[i] = beams
        done += len(chosen)
        if progress is not None:
          progress(done)
    finally:  # On an error or Ctrl-C, batches not yet begun are dropped, not searched.
      pool.shutdown(wait=True, cancel_futures=True)
    return outputs

  def _plan(self, sources: List[List[int]]) -> List[batching.PlannedBatch]:
    """Per batch: (source indices, padded ids [rows, width], lengths [rows], new shape?)."""
    return batching.plan(sources, self.hparams, self.shapes_seen)

  def concurrent_batches(self) -> int:
    """Batches searched at once: hparams.concurrent_batches, or 0 -> one per usable CPU core.

    XLA's compiled search runs mostly on one thread on a CPU (its ops are small), so on
    a CPU each core takes a batch; an accelerator runs one search at a time.
    """
    if self.hparams.concurrent_batches:
      return self.hparams.concurrent_batches
    if xla_choice.accelerator():
      return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

  def decode_ids(self, sources: Sequence[Sequence[int]]) -> List[List[int]]:
    """Source ids (without EOS) -> best target ids (without EOS), in input order."""
    return [beams[0][0] if beams else [] for beams in self.decode_nbest(sources)]
