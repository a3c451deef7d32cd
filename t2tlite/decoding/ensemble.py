"""Several trained models decoding as one: the mean of their next-token distributions.

Each next token is scored by the arithmetic mean of the members' probabilities,
log p(y | y_<t, x) = logsumexp_m log p_m(y | y_<t, x) - log M, as fairseq's
EnsembleModel does (tensor2tensor decoded single models only; OpenNMT-py
averages the members' log-probabilities instead, which is not a distribution).
A hypothesis's score is then the log-probability of that mixture, so beam
search, its length penalty and early stopping (search.py) mean what they mean
for one model.

`Ensemble` presents the decode interface of `Transformer` (encode, the cached
and uncached decode states and steps, the beam reorder), so the one compiled
search (decoder.py) decodes it unchanged: every member keeps its own caches,
reordered with the same beams. Members must read and write the same ids;
`loading.load_pipeline` checks each run against --data_dir's vocabulary.
"""

import math
from typing import Sequence

from keras import ops


class Ensemble:
  """Decodes with the mean of the members' next-token distributions (each a `Transformer`)."""

  def __init__(self, members: Sequence):
    if len(members) < 2:
      raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
    vocab = {m.hparams.target_vocab_size for m in members}
    if len(vocab) > 1:
      raise ValueError(f"ensemble members disagree on the target vocabulary size: {sorted(vocab)}")
    self.members = tuple(members)
    # What the decoder reads from a model's hparams (max_length, xla, dtype): the first
    # member's. The shortest max_length of all, so no member sees a longer source.
    shortest = min(m.hparams.max_length for m in members)
    self.hparams = members[0].hparams.replace(max_length=shortest)

  def encode(self, inputs):
    """[b, s] ids -> (per-member memories, per-member memory masks), as tuples."""
    encoded = [member.encode(inputs) for member in self.members]
    return tuple(memory for memory, _ in encoded), tuple(mask for _, mask in encoded)

  def initial_decode_state(self, memory, memory_mask, max_length):
    """(per-member states, per-member contexts): each member's own caches."""
    return self._each_initial("initial_decode_state", memory, memory_mask, max_length)

  def initial_uncached_state(self, memory, memory_mask, max_length):
    return self._each_initial("initial_uncached_state", memory, memory_mask, max_length)

  def decode_step(self, ids, step, state, context, horizons=None):
    """ids [r] -> (log of the members' mean probability [r, vocab] float32, new states)."""
    return self._each_step("decode_step", ids, step, state, context, horizons)

  def decode_step_uncached(self, ids, step, state, context, horizons=None):
    return self._each_step("decode_step_uncached", ids, step, state, context, horizons)

  def reorder_decode_state(self, state, parent_rows):
    """Every member's state follows the same surviving beams."""
    return tuple(member.reorder_decode_state(member_state, parent_rows)
                 for member, member_state in zip(self.members, state))

  def _each_initial(self, method, memory, memory_mask, max_length):
    pairs = [getattr(member, method)(member_memory, mask, max_length)
             for member, member_memory, mask in zip(self.members, memory, memory_mask)]
    return tuple(state for state, _ in pairs), tuple(context for _, context in pairs)

  def _each_step(self, method, ids, step, state, context, horizons):
    log_probs, new_states = [], []
    for member, member_state, member_context in zip(self.members, state, context):
      logits, new_state = getattr(member, method)(ids, step, member_state, member_context,
                                                  horizons)
      log_probs.append(ops.log_softmax(ops.cast(logits, "float32"), axis=-1))
      new_states.append(new_state)
    mixture = ops.logsumexp(ops.stack(log_probs), axis=0) - math.log(len(self.members))
    return mixture, tuple(new_states)
