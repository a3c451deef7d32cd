"""Batched decoding of id sequences and text lines with a trained model.

Sources are sorted by length and cut into batches, each padded to a multiple
of `length_multiple` so the XLA-compiled search is compiled for few shapes;
results are written back in input order. Each sentence may generate up to
its own length + extra_length tokens (Section 6.1), its encoder output is
computed once, and its cross-attention keys/values once per sentence inside
`Transformer.initial_decode_state`.
"""

from typing import List, Sequence

import numpy as np
import tensorflow as tf

from t2tlite.data.text_encoder import EOS_ID, PAD_ID
from t2tlite.decoding import search
from t2tlite.decoding.decode_hparams import DecodeHParams


class Decoder:
  """Turns source id lists into target id lists with beam or greedy search."""

  def __init__(self, model, decode_hparams: DecodeHParams = DecodeHParams()):
    self.model = model
    self.hparams = decode_hparams
    self._search = tf.function(self._search_batch, jit_compile=model.hparams.xla,
                               reduce_retracing=False)

  def _search_batch(self, inputs, source_lengths):
    """inputs int32 [b, s] (EOS-terminated, padded); source_lengths [b] without EOS."""
    hp = self.hparams
    decode_length = inputs.shape[1] + hp.extra_length  # Static: the padded length.
    memory, memory_mask = self.model.encode(inputs)
    state, context = self.model.initial_decode_state(memory, memory_mask, decode_length + 1)
    max_lengths = source_lengths + hp.extra_length
    start = tf.fill(tf.shape(source_lengths), PAD_ID)
    if hp.beam_size == 1:
      step_fn = lambda ids, step, st: self.model.decode_step(ids, step, st, context)
      return search.greedy_search(step_fn, start, state, max_lengths, decode_length, EOS_ID)
    context = search.tile_to_beams(context, hp.beam_size)
    step_fn = lambda ids, step, st: self.model.decode_step(ids, step, st, context)
    return search.beam_search(step_fn, start, state, hp.beam_size, hp.alpha, max_lengths,
                              decode_length, EOS_ID)

  def decode_ids(self, sources: Sequence[Sequence[int]]) -> List[List[int]]:
    """Source ids (without EOS) -> best target ids (without EOS), in input order."""
    hp = self.hparams
    outputs: List[List[int]] = [[] for _ in sources]
    order = sorted((i for i, s in enumerate(sources) if len(s)), key=lambda i: len(sources[i]))
    for start in range(0, len(order), hp.batch_size):
      chosen = order[start:start + hp.batch_size]
      longest = max(len(sources[i]) for i in chosen) + 1  # + EOS
      width = -(-longest // hp.length_multiple) * hp.length_multiple
      batch = np.full([len(chosen), width], PAD_ID, np.int32)
      for row, i in enumerate(chosen):
        batch[row, :len(sources[i])] = sources[i]
        batch[row, len(sources[i])] = EOS_ID
      lengths = np.array([len(sources[i]) for i in chosen], np.int32)
      result = self._search(tf.constant(batch), tf.constant(lengths))
      best = result.ids[:, 0].numpy()
      for row, i in enumerate(chosen):
        outputs[i] = _until_eos(best[row])
    return outputs

  def decode_lines(self, lines: Sequence[str], input_encoder, target_encoder) -> List[str]:
    """Text in, text out; an empty line decodes to an empty line."""
    sources = [input_encoder.encode(line) if line.strip() else [] for line in lines]
    return [target_encoder.decode(ids) if sources[i] else ""
            for i, ids in enumerate(self.decode_ids(sources))]


def _until_eos(ids) -> List[int]:
  out = []
  for token in ids:
    if token == EOS_ID or token == PAD_ID:
      break
    out.append(int(token))
  return out
