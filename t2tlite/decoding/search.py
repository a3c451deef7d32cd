"""Batched beam search and greedy search over an incremental decoder.

Both searches are model-agnostic: the model is a function
`symbols_to_logits_fn(ids, step, state) -> (logits, new_state)` that consumes
the token at position `step` (position 0 holds the start symbol) and returns
float logits [n, vocab] for the token at position step + 1, together with its
updated cache `state` (a nested structure of tensors with leading dim n).

Everything is a `tf.while_loop` over tensors of static shape: the
hypotheses live in fixed [batch, beam, decode_length + 2] buffers (start symbol
in column 0) and one step writes one column. The loop therefore compiles with
`tf.function(jit_compile=True)` as well as it runs eagerly, and the output
shapes do not depend on when the loop stops.

Beam search follows tensor2tensor (Vaswani et al. 2017, Section 6.1; Wu et al.
2016 for the length penalty):

* A hypothesis Y scores log P(Y|X) / lp(|Y|), lp(L) = ((5 + L) / 6) ** alpha,
  where |Y| counts the generated tokens including the EOS.
* Each step extends the `beam` alive hypotheses by every token and takes the
  top 2 * beam extensions by log-probability; at most `beam` of them end in EOS
  (one per parent), so at least `beam` do not: the best `beam` of those stay
  alive, and those ending in EOS compete by normalized score with the finished
  set, whose best `beam` are kept.
* A sentence whose hypotheses have generated max_lengths[b] tokens can only
  continue with EOS. The forced EOS is scored with the model's own log-prob
  (the search space is cut; the distribution is not renormalized), so every
  score is the model's log P(Y|X), whatever the search visited.
* Early stopping is exact with respect to the beam: a sentence is done once it
  holds `beam` finished hypotheses and the worst of them scores strictly more
  than any alive hypothesis could still reach, i.e. its log-prob (which can only
  fall) divided by the largest length penalty it could still get; or once it
  has no alive hypothesis left (after the forced EOS). tensor2tensor compares
  the *best* finished score instead, which only protects the top-1 hypothesis;
  here the returned beams are the best `beam` finished hypotheses that running
  the search to the end would return. A done sentence proposes no more
  candidates, so its results are frozen while the rest of the batch decodes, and
  the loop ends as soon as every sentence is done.
* Several alphas in one search. The alive hypotheses are ranked by log-prob
  alone, so which of them the search visits does not depend on alpha; only the
  finished set does. Given a list of alphas, one search keeps a finished set
  per alpha (rows [batch * alphas], sentence-major) and a sentence is done once
  it is done for every alpha. After a sentence is done for one alpha, every
  later candidate scores strictly below that alpha's worst finished
  hypothesis, so its set stays as the one-alpha search froze it: each alpha's
  beams are those of a search with that alpha alone. A dev grid over alphas
  (recipes/choose_decode.py) runs one search per beam size, not one per point.

A token constraint (`constraint`, e.g. `tree_constraint.TreeConstraint`)
restricts which tokens a hypothesis may take next: an object with
`mask(state) -> bool [rows, vocab]` and `update(state, tokens [rows]) -> state`,
whose initial state [batch, ...] the caller passes as `constraint_state`. The
search tiles that state to the beams, reorders it with the surviving beams and
updates it with each chosen token, inside the loop. Disallowed tokens are
invalid candidates; allowed ones keep the model's log-probs (no renormalisation,
as with the forced EOS).

Candidate lists. A constraint that allows only a few tokens at a time may
also offer `candidates(state) -> (ids int32 [rows, C], allowed bool [rows, C])`,
the tokens it may allow (each once, ascending, so ties break as over the whole
vocabulary). Beam search then ranks beam x C candidates per sentence instead of
beam x vocab: the same hypotheses, without the passes over [rows, vocab]
(candidate scores, the constraint's mask, a top-k over beam x vocab) that cost
more than the model at parsing's beam 21 (tree_constraint.py: C is the labels
plus 3). The log-softmax still normalizes over the whole vocabulary.

Token choice is one hook in two parts: the constraint says which tokens are
allowed, and greedy search's `choose` picks one of them (argmax, or a draw:
`sampling.Sampler`, `sampling_method=random`). Beam search always ranks
(sampling is a one-hypothesis search, as in tensor2tensor).

Empty slots (which only arise when fewer than `beam` distinct sequences exist)
and impossible candidates are tracked with explicit boolean masks rather than
with magic scores; -inf only appears as a sort key for top_k, never in
arithmetic, and stored scores use the finite NEG_INF, so nothing can turn NaN.
"""

import typing

import tensorflow as tf

from t2tlite.constants import NEG_INF
# Sort key of invalid candidates: below every valid score, NEG_INF included.
_SORT_MIN = float("-inf")


class SearchResult(typing.NamedTuple):
  """Output of `beam_search` and `greedy_search` (greedy: beam = 1).

  ids: int32 [batch, beam, decode_length + 1], generated tokens without the
    start symbol, EOS included, 0 (pad) after it; all 0 in an empty slot.
  scores: float32 [batch, beam], best first. Beam search: log P(Y|X) / lp(|Y|);
    greedy: log P(Y|X). NEG_INF in an empty slot.
  lengths: int32 [batch, beam], |Y| including the EOS; 0 in an empty slot.
  steps: int32 scalar, how many times symbols_to_logits_fn ran.
  """
  ids: tf.Tensor
  scores: tf.Tensor
  lengths: tf.Tensor
  steps: tf.Tensor


def _run_loop(cond, body, initial, decode_length):
  """Runs `body(s) -> (s,)` while `cond(s)` and fewer than decode_length + 1 steps ran."""
  (state,) = tf.while_loop(lambda s: tf.logical_and(s.step < decode_length + 1, cond(s)),
                           body, (initial,))
  return state


def length_penalty(length, alpha):
  """GNMT length penalty ((5 + length) / 6) ** alpha as float32 (any shape)."""
  length = tf.cast(length, tf.float32)
  return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


def _shape_list(tensor):
  """Static dims as Python ints where known, scalar tensors elsewhere."""
  dynamic = tf.shape(tensor)
  return [dim if dim is not None else dynamic[i] for i, dim in enumerate(tensor.shape)]


def _merge_beams(tensor):
  """[batch, beam, ...] -> [batch * beam, ...]."""
  shape = _shape_list(tensor)
  return tf.reshape(tensor, [shape[0] * shape[1]] + shape[2:])


def _split_beams(tensor, batch, beam):
  """[batch * beam, ...] -> [batch, beam, ...]."""
  return tf.reshape(tensor, [batch, beam] + _shape_list(tensor)[1:])


def tile_to_beams(nested, beam_size):
  """Repeats every tensor [batch, ...] into [batch * beam_size, ...].

  Copies of one sentence are adjacent: row b * beam_size + k is copy k of
  sentence b (numpy.repeat along axis 0), the layout that `_split_beams` reads.
  """
  def tile(tensor):
    tensor = tf.convert_to_tensor(tensor)
    tiled = tf.repeat(tensor[:, tf.newaxis], beam_size, axis=1)  # [batch, beam, ...]
    return _merge_beams(tiled)
  return tf.nest.map_structure(tile, nested)


def _gather_beams(nested, indices):
  """Selects beams per sentence: tensors [batch, n, ...], indices [batch, k] -> [batch, k, ...]."""
  return tf.nest.map_structure(lambda t: tf.gather(t, indices, batch_dims=1), nested)


def _top_k_indices(scores, valid, k):
  """Indices [batch, k] of the k best valid entries of scores [batch, n], best first.

  Invalid entries sort last; ties go to the lower index (top_k is stable).
  """
  keys = tf.where(valid, scores, _SORT_MIN)
  width = keys.shape[-1]
  if width is not None and width >= 4 * k * _TOP_K_BLOCK:
    return _blocked_top_k_indices(keys, k, _TOP_K_BLOCK)
  _, indices = tf.math.top_k(keys, k=k)
  return indices


# Candidates per block of the two-stage top-k; 128 measured fastest (bench/decode_speed.py).
_TOP_K_BLOCK = 128


def _blocked_top_k_indices(keys, k, block):
  """tf.math.top_k(keys, k).indices for wide rows, exactly, ties included, in two cheap stages.

  XLA's CPU top_k over beam x vocab candidates (32000 per sentence at beam 4)
  costs about as much as a decoder layer. But each of the k best entries lies
  in a block whose maximum is among the k largest block maxima: a block whose
  maximum reaches an entry's value holds an entry at least that large, and
  only k - 1 entries beat it. So: block maxima (one vectorized pass), the k
  best blocks, then top_k over just their k * block entries. The chosen blocks
  are put back in index order, so ties still go to the lower index, as top_k's.
  """
  rows, width = _shape_list(keys)[0], keys.shape[-1]
  num_blocks = -(-width // block)
  padded = tf.pad(keys, [[0, 0], [0, num_blocks * block - width]], constant_values=_SORT_MIN)
  blocks = tf.reshape(padded, [rows, num_blocks, block])
  _, best_blocks = tf.math.top_k(tf.reduce_max(blocks, axis=-1), k=k)
  best_blocks = tf.sort(best_blocks, axis=-1)
  candidates = tf.reshape(tf.gather(blocks, best_blocks, batch_dims=1), [rows, k * block])
  _, within = tf.math.top_k(candidates, k=k)
  return tf.gather(best_blocks, within // block, batch_dims=1) * block + within % block


def _write_position(sequences, position, tokens):
  """Writes tokens [...] at column `position` (int32 scalar) of sequences [..., width]."""
  width = _shape_list(sequences)[-1]  # Dynamic in an exported search (any source width).
  at_position = tf.equal(tf.range(width), position)
  return tf.where(at_position, tokens[..., tf.newaxis], sequences)


def _clamped_max_lengths(max_lengths, decode_length):
  """int32 [batch] max generated tokens (EOS not counted), within [0, decode_length]."""
  max_lengths = tf.cast(max_lengths, tf.int32)
  return tf.clip_by_value(max_lengths, 0, decode_length)


def _log_probs(logits):
  """Any-dtype logits [n, vocab] -> float32 log-probs [n, vocab]."""
  return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)


def _vocab_size(logits):
  """Static vocab size of logits [n, vocab] where known, else a scalar tensor."""
  return _shape_list(logits)[-1]


class _BeamState(typing.NamedTuple):
  """Loop variables of beam_search. Sequences keep the start symbol in column 0."""
  step: tf.Tensor              # int32 scalar: model calls so far = position of the last token.
  alive_seq: tf.Tensor         # int32 [batch, beam, decode_length + 2]
  alive_log_probs: tf.Tensor   # float32 [batch, beam]: log P(prefix); NEG_INF where invalid.
  alive_valid: tf.Tensor       # bool [batch, beam]
  model_state: typing.Any      # nested tensors [batch * beam, ...]
  constraint_state: typing.Any  # nested tensors [batch * beam, ...]; () without a constraint.
  # The finished sets, one per alpha: rows [batch * alphas], alpha-minor (one alpha: [batch]).
  finished_seq: tf.Tensor      # int32 [batch * alphas, beam, decode_length + 2]
  finished_scores: tf.Tensor   # float32 [batch * alphas, beam]: normalized; NEG_INF where invalid.
  finished_lengths: tf.Tensor  # int32 [batch * alphas, beam]: |Y| including EOS.
  finished_valid: tf.Tensor    # bool [batch * alphas, beam]
  done: tf.Tensor              # bool [batch]: no better finished hypothesis can appear.


def _initial_beam_state(initial_ids, initial_state, beam_size, decode_length,
                        constraint_state=(), num_alphas=1):
  """Loop variables before the first step: one valid alive beam per sentence."""
  batch = _shape_list(initial_ids)[0]
  sets = batch * num_alphas  # One finished set per sentence and alpha.
  width = decode_length + 2
  start = tf.repeat(tf.cast(initial_ids, tf.int32)[:, tf.newaxis], beam_size, axis=1)
  alive_seq = _write_position(tf.zeros([batch, beam_size, width], tf.int32), 0, start)
  # Only beam 0 is a real hypothesis at first; copies would yield duplicates.
  first_beam = tf.equal(tf.range(beam_size), 0)[tf.newaxis]  # [1, beam]
  alive_valid = tf.tile(first_beam, [batch, 1])
  return _BeamState(
      step=tf.constant(0, tf.int32),
      alive_seq=alive_seq,
      alive_log_probs=tf.where(alive_valid, 0.0, NEG_INF),
      alive_valid=alive_valid,
      model_state=tile_to_beams(initial_state, beam_size),
      constraint_state=tile_to_beams(constraint_state, beam_size),
      finished_seq=tf.zeros([sets, beam_size, width], tf.int32),
      finished_scores=tf.fill([sets, beam_size], NEG_INF),
      finished_lengths=tf.zeros([sets, beam_size], tf.int32),
      finished_valid=tf.zeros([sets, beam_size], tf.bool),
      done=tf.zeros([batch], tf.bool))


def _candidate_log_probs(s, log_probs, tokens, max_lengths, eos_id):
  """Scores the one-token extensions of the alive beams.

  Args:
    s: _BeamState before the step.
    log_probs: float32 [batch, beam, width], next-token log-probs per alive beam
      of the tokens `tokens`.
    tokens: int32 [1, 1, vocab] (every token: width = vocab) or [batch, beam, width]
      (a constraint's candidate lists).
    max_lengths: int32 [batch].
    eos_id: Python int.
  Returns:
    (log_probs [batch, beam, width] of the extended prefixes, NEG_INF where
    invalid; valid bool [batch, beam, width]). An extension is invalid when its
    parent is, when its sentence is done, or when it is not EOS although the
    parent already has max_lengths[b] tokens.
  """
  is_eos = tf.equal(tokens, eos_id)
  forced = tf.greater_equal(s.step, max_lengths)[:, tf.newaxis, tf.newaxis]  # [batch, 1, 1]
  valid = (s.alive_valid[:, :, tf.newaxis] & ~s.done[:, tf.newaxis, tf.newaxis]
           & (is_eos | ~forced))
  extended = s.alive_log_probs[:, :, tf.newaxis] + log_probs
  return tf.where(valid, extended, NEG_INF), valid


def _per_alpha(tensor, num_alphas):
  """[batch, ...] -> [batch * alphas, ...], each sentence's row repeated once per alpha."""
  return tensor if num_alphas == 1 else tf.repeat(tensor, num_alphas, axis=0)


def _per_set(penalties, batch):
  """Per alpha, a penalty [batch] or scalar -> [batch * alphas]; one alpha: itself, unchanged."""
  if len(penalties) == 1:
    return penalties[0]
  return tf.reshape(tf.stack([tf.broadcast_to(p, [batch]) for p in penalties], axis=-1), [-1])


def _is_done(s, max_lengths, alphas):
  """bool [batch]: sentences that cannot gain a better finished hypothesis, for any alpha.

  After step s.step the alive hypotheses have s.step + 1 tokens and end with
  between s.step + 2 and max_lengths + 1 tokens; since their log-probs only
  fall and are <= 0, the best score one could reach is its log-prob over the
  largest penalty in that range (lp is monotonic, so one of the two ends).
  """
  num_alphas = len(alphas)
  best_penalty = _per_set([tf.maximum(length_penalty(s.step + 2, alpha),
                                      length_penalty(max_lengths + 1, alpha))
                           for alpha in alphas], _shape_list(max_lengths)[0])  # [batch * alphas]
  reachable = _per_alpha(s.alive_log_probs, num_alphas) / best_penalty[:, tf.newaxis]
  alive_valid = _per_alpha(s.alive_valid, num_alphas)
  best_reachable = tf.reduce_max(tf.where(alive_valid, reachable, _SORT_MIN), axis=1)
  worst_finished = tf.reduce_min(s.finished_scores, axis=1)
  full = tf.reduce_all(s.finished_valid, axis=1)
  settled = full & tf.greater(worst_finished, best_reachable)  # [batch * alphas]
  if num_alphas > 1:
    settled = tf.reduce_all(tf.reshape(settled, [-1, num_alphas]), axis=1)
  none_alive = ~tf.reduce_any(s.alive_valid, axis=1)
  return s.done | none_alive | settled


def gather_rows(state, rows):
  """Default state reordering: every tensor [n, ...] of `state` gathered at int32 rows [n]."""
  return tf.nest.map_structure(lambda t: tf.gather(t, rows), state)


def beam_search(symbols_to_logits_fn, initial_ids, initial_state, beam_size, alpha,
                max_lengths, decode_length, eos_id=1, reorder_state=gather_rows,
                constraint=None, constraint_state=()):
  """Batched beam search with GNMT length penalty and exact early stopping.

  Args:
    symbols_to_logits_fn: (ids int32 [batch * beam], step int32 scalar, state)
      -> (logits [batch * beam, vocab], new state); ids are the tokens at
      position `step`, logits give the token at position step + 1. Rows are
      beam-major per sentence (see `tile_to_beams`); any per-sentence context the
      function closes over must be tiled the same way.
    initial_ids: int32 [batch], the start symbol of each sentence (position 0).
    initial_state: nested tensors [batch, ...]; tiled to beams here and
      reordered along with the surviving beams at every step.
    beam_size: Python int.
    alpha: length-penalty exponent (Python float or float32 scalar), or a list
      of Python floats: one search, a finished set per alpha (module docstring).
    max_lengths: int32 [batch], most generated tokens per sentence before the
      EOS, which is then forced; clipped to [0, decode_length].
    decode_length: Python int >= max(max_lengths); buffer width - 1.
    eos_id: Python int.
    reorder_state: (state, parent_rows int32 [batch * beam]) -> the state of
      the surviving hypotheses, row i continuing row parent_rows[i]. The
      default gathers every tensor; a model can move less (see
      `Transformer.reorder_decode_state`).
    constraint: None, or a token constraint (module docstring) whose
      `mask`/`update` see rows [batch * beam].
    constraint_state: its initial state, nested tensors [batch, ...].
  Returns:
    SearchResult with ids [batch, beam_size, decode_length + 1], the best
    `beam_size` finished hypotheses per sentence sorted by normalized score;
    given a list of alphas, [batch, alphas, beam_size, ...] (scores and lengths
    likewise), each alpha's as its own search would return them.
  """
  several = isinstance(alpha, (list, tuple))
  alphas = list(alpha) if several else [alpha]
  if not alphas:
    raise ValueError("alpha: give at least one length-penalty exponent")
  num_alphas = len(alphas)
  max_lengths = _clamped_max_lengths(max_lengths, decode_length)
  initial = _initial_beam_state(initial_ids, initial_state, beam_size, decode_length,
                                constraint_state if constraint is not None else (), num_alphas)
  batch = _shape_list(initial.alive_seq)[0]
  listed = hasattr(constraint, "candidates")

  def body(s):
    ids = tf.gather(s.alive_seq, s.step, axis=2)  # [batch, beam]
    logits, new_model_state = symbols_to_logits_fn(_merge_beams(ids), s.step, s.model_state)
    log_probs = _log_probs(logits)  # [batch * beam, vocab]
    if listed:  # Rank the listed tokens only (module docstring, "Candidate lists").
      tokens, allowed = constraint.candidates(s.constraint_state)  # [batch * beam, C]
      log_probs = tf.gather(log_probs, tokens, batch_dims=1)
      tokens = _split_beams(tokens, batch, beam_size)
      allowed = _split_beams(allowed, batch, beam_size)
    else:
      tokens = tf.range(_vocab_size(log_probs))[tf.newaxis, tf.newaxis]  # [1, 1, vocab]
      allowed = None if constraint is None else _split_beams(
          constraint.mask(s.constraint_state), batch, beam_size)
    log_probs = _split_beams(log_probs, batch, beam_size)  # [batch, beam, width]
    width = _vocab_size(log_probs)
    cand_log_probs, cand_valid = _candidate_log_probs(s, log_probs, tokens, max_lengths, eos_id)
    if allowed is not None:
      cand_valid = cand_valid & allowed
      cand_log_probs = tf.where(allowed, cand_log_probs, NEG_INF)
    flat_log_probs = tf.reshape(cand_log_probs, [batch, -1])  # [batch, beam * width]
    flat_valid = tf.reshape(cand_valid, [batch, -1])

    # The 2 * beam best extensions: enough to keep `beam` alive after EOS ones leave.
    top = _top_k_indices(flat_log_probs, flat_valid, 2 * beam_size)  # [batch, 2 * beam]
    top_log_probs, top_valid = _gather_beams((flat_log_probs, flat_valid), top)
    top_parent = top // width
    if listed:
      top_token = tf.gather(tf.reshape(tokens, [batch, -1]), top, batch_dims=1)
    else:
      top_token = top % width
    top_seq = _write_position(_gather_beams(s.alive_seq, top_parent), s.step + 1, top_token)
    top_eos = tf.equal(top_token, eos_id)

    # Alive: the best `beam` extensions that do not end in EOS.
    alive_valid_top = top_valid & ~top_eos
    keep = _top_k_indices(top_log_probs, alive_valid_top, beam_size)  # [batch, beam]
    alive_seq, alive_log_probs, alive_valid, alive_parent, alive_token = _gather_beams(
        (top_seq, top_log_probs, alive_valid_top, top_parent, top_token), keep)
    parent_rows = _merge_beams(alive_parent + tf.range(batch)[:, tf.newaxis] * beam_size)
    model_state = reorder_state(new_model_state, parent_rows)
    constraint_state = s.constraint_state
    if constraint is not None:
      constraint_state = constraint.update(gather_rows(constraint_state, parent_rows),
                                           _merge_beams(alive_token))

    # Finished: the previous set and the new EOS extensions, best `beam` kept (per alpha).
    new_length = s.step + 1
    penalty = _per_set([length_penalty(new_length, alpha) for alpha in alphas], batch)
    new_scores = _per_alpha(top_log_probs, num_alphas) / (
        penalty if num_alphas == 1 else penalty[:, tf.newaxis])
    seq = tf.concat([s.finished_seq, _per_alpha(top_seq, num_alphas)], axis=1)  # [sets, 3 beam, w]
    scores = tf.concat([s.finished_scores, new_scores], axis=1)
    lengths = tf.concat([s.finished_lengths,
                         _per_alpha(tf.zeros_like(top) + new_length, num_alphas)], axis=1)
    valid = tf.concat([s.finished_valid, _per_alpha(top_valid & top_eos, num_alphas)], axis=1)
    best = _top_k_indices(scores, valid, beam_size)
    finished_seq, finished_scores, finished_lengths, finished_valid = _gather_beams(
        (seq, scores, lengths, valid), best)

    s = _BeamState(
        step=s.step + 1,
        alive_seq=alive_seq,
        alive_log_probs=tf.where(alive_valid, alive_log_probs, NEG_INF),
        alive_valid=alive_valid,
        model_state=model_state,
        constraint_state=constraint_state,
        finished_seq=finished_seq,
        finished_scores=tf.where(finished_valid, finished_scores, NEG_INF),
        finished_lengths=finished_lengths,
        finished_valid=finished_valid,
        done=s.done)
    return (s._replace(done=_is_done(s, max_lengths, alphas)),)

  final = _run_loop(lambda s: ~tf.reduce_all(s.done), body, initial, decode_length)
  valid = final.finished_valid
  result = SearchResult(
      ids=tf.where(valid[:, :, tf.newaxis], final.finished_seq[:, :, 1:], 0),
      scores=tf.where(valid, final.finished_scores, NEG_INF),
      lengths=tf.where(valid, final.finished_lengths, 0),
      steps=final.step)
  if not several:
    return result
  split = lambda t: tf.reshape(t, [batch, num_alphas] + _shape_list(t)[1:])  # noqa: E731
  return result._replace(ids=split(result.ids), scores=split(result.scores),
                         lengths=split(result.lengths))


class _GreedyState(typing.NamedTuple):
  """Loop variables of greedy_search."""
  step: tf.Tensor          # int32 scalar
  seq: tf.Tensor           # int32 [batch, decode_length + 2], start symbol in column 0.
  log_probs: tf.Tensor     # float32 [batch]: log P(generated tokens).
  lengths: tf.Tensor       # int32 [batch]: tokens generated up to and including EOS.
  finished: tf.Tensor      # bool [batch]
  model_state: typing.Any  # nested tensors [batch, ...]
  constraint_state: typing.Any  # nested tensors [batch, ...]; () without a constraint.


def argmax_choice(keys, step):
  """The default token choice: the most likely allowed token (lowest id on ties)."""
  del step  # The argmax needs no randomness.
  return tf.argmax(keys, axis=-1, output_type=tf.int32)


def greedy_search(symbols_to_logits_fn, initial_ids, initial_state,
                  max_lengths, decode_length, eos_id=1, constraint=None, constraint_state=(),
                  choose=argmax_choice):
  """Batched one-hypothesis decoding (argmax, or sampling); EOS forced after max_lengths[b] tokens.

  Args: as `beam_search` with beam 1 (ids, logits and state have leading dim
    batch); after a sentence's EOS it is fed pad (0) and its score frozen.
    choose: the token choice, (keys float32 [batch, vocab], step int32 scalar)
      -> int32 [batch], where keys are the next-token log-probs with the
      tokens a `constraint` disallows at -inf. Default: argmax; sampling.py's
      `Sampler` draws instead. The forced EOS overrides it.
  Returns:
    SearchResult with beam = 1; scores are unnormalized log P(Y|X) of the
    tokens chosen (the model's log-probs, whatever the choice).
  """
  max_lengths = _clamped_max_lengths(max_lengths, decode_length)
  batch = _shape_list(initial_ids)[0]
  seq = _write_position(tf.zeros([batch, decode_length + 2], tf.int32), 0,
                        tf.cast(initial_ids, tf.int32))
  initial = _GreedyState(
      step=tf.constant(0, tf.int32),
      seq=seq,
      log_probs=tf.zeros([batch], tf.float32),
      lengths=tf.zeros([batch], tf.int32),
      finished=tf.zeros([batch], tf.bool),
      model_state=initial_state,
      constraint_state=constraint_state if constraint is not None else ())

  def body(s):
    ids = tf.gather(s.seq, s.step, axis=1)  # [batch]
    logits, model_state = symbols_to_logits_fn(ids, s.step, s.model_state)
    log_probs = _log_probs(logits)  # [batch, vocab]
    keys = log_probs
    if constraint is not None:
      keys = tf.where(constraint.mask(s.constraint_state), log_probs, _SORT_MIN)
    chosen = choose(keys, s.step)
    token = tf.where(s.step >= max_lengths, eos_id, chosen)
    token_log_prob = tf.gather(log_probs, token, batch_dims=1)
    token = tf.where(s.finished, 0, token)
    constraint_state = s.constraint_state
    if constraint is not None:
      constraint_state = constraint.update(constraint_state, token)
    s = _GreedyState(
        step=s.step + 1,
        seq=_write_position(s.seq, s.step + 1, token),
        log_probs=s.log_probs + tf.where(s.finished, 0.0, token_log_prob),
        lengths=tf.where(s.finished, s.lengths, s.step + 1),
        finished=s.finished | tf.equal(token, eos_id),
        model_state=model_state,
        constraint_state=constraint_state)
    return (s,)

  final = _run_loop(lambda s: ~tf.reduce_all(s.finished), body, initial, decode_length)
  return SearchResult(
      ids=final.seq[:, tf.newaxis, 1:],
      scores=final.log_probs[:, tf.newaxis],
      lengths=final.lengths[:, tf.newaxis],
      steps=final.step)
