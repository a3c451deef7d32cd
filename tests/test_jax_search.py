"""The JAX beam search returns the TensorFlow search's beams.

Two checks against search.py's beam search (itself checked against brute force
in tests/test_search.py): on toy language models written twice (tf and
jax.numpy over one table of logits), over beam sizes, length penalties and length
caps; and on the tiny Transformer with one set of weights, each
backend in its own process (t2tlite's Decoder under TensorFlow, JaxDecoder under
JAX, which must not import TensorFlow).
"""

import importlib.util

import numpy as np
import pytest

from tests.helpers import backend_python

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                reason='jax is not installed (pip install -e ".[jax]")')

VOCAB, STATES = 7, 5


def _table(seed):
  """Logits [STATES, last token, VOCAB]: the next token depends on the last one and a state."""
  rng = np.random.RandomState(seed)
  table = rng.normal(0.0, 2.0, size=(STATES, VOCAB, VOCAB)).astype(np.float32)
  table[:, :, 0] = -30.0  # PAD is never a good next token (as in a trained model).
  return table


def _both_searches(table, beam, alpha, max_lengths, decode_length):
  import jax.numpy as jnp
  import tensorflow as tf

  from t2tlite.decoding import jax_search, search

  batch = len(max_lengths)
  initial_state = {"state": np.arange(batch, dtype=np.int32) % STATES}

  def tf_step(ids, step, st):
    # The state advances by the token chosen: (state + token) % STATES.
    logits = tf.gather_nd(table, tf.stack([st["state"], ids], axis=1))
    return logits, {"state": (st["state"] + ids + step) % STATES}

  def jax_step(ids, step, st):
    logits = jnp.asarray(table)[st["state"], ids]
    return logits, {"state": (st["state"] + ids + step) % STATES}

  start = np.zeros([batch], np.int32)
  lengths = np.asarray(max_lengths, np.int32)
  tf_result = search.beam_search(tf_step, tf.constant(start), initial_state, beam, alpha,
                                 tf.constant(lengths), decode_length)
  jax_result = jax_search.beam_search(jax_step, jnp.asarray(start), initial_state, beam, alpha,
                                      jnp.asarray(lengths), decode_length)
  return tf_result, jax_result


@pytest.mark.parametrize("seed,beam,alpha,max_lengths", [
    (0, 4, 0.6, [6, 3, 9, 0]),
    (1, 1, 0.0, [5, 5, 5]),
    (2, 3, 1.2, [8, 2, 7, 7, 1]),
    (3, 6, 0.6, [9, 9]),
])
def test_jax_beam_search_returns_the_tensorflow_beams(seed, beam, alpha, max_lengths):
  decode_length = 9
  tf_result, jax_result = _both_searches(_table(seed), beam, alpha, max_lengths, decode_length)
  np.testing.assert_array_equal(np.asarray(jax_result.ids), tf_result.ids.numpy())
  np.testing.assert_array_equal(np.asarray(jax_result.lengths), tf_result.lengths.numpy())
  np.testing.assert_allclose(np.asarray(jax_result.scores), tf_result.scores.numpy(),
                             rtol=1e-5, atol=1e-5)
  assert int(jax_result.steps) == int(tf_result.steps)  # Same early stop.
  # The toy models end hypotheses at different points: the length caps are exercised.
  lengths = tf_result.lengths.numpy()
  assert len(set(lengths[lengths > 0].tolist())) > 1


class _ParityConstraint:
  """A mask-only token constraint (no candidate lists), written over `ops` (tf or jax.numpy):
  after an even token only odd ones may follow and after an odd one only even ones; EOS
  always. Exercises the searches' masked path, which the tree constraint (listed) skips."""

  def __init__(self, ops, arange, vocab):
    self.ops, self.arange, self.vocab = ops, arange, vocab

  def initial_state(self, batch):
    return {"last": self.ops.zeros([batch], "int32")}

  def mask(self, state):
    tokens = self.arange(self.vocab)[None]
    return ((tokens + state["last"][:, None]) % 2 == 1) | (tokens == 1)

  def update(self, state, tokens):
    return {"last": tokens}


def test_jax_beam_search_under_a_mask_constraint_returns_the_tensorflow_beams():
  import jax.numpy as jnp
  import tensorflow as tf

  from t2tlite.decoding import jax_search, search

  table, lengths = _table(4), np.array([6, 3, 9], np.int32)

  def tf_step(ids, step, st):
    return tf.gather_nd(table, tf.stack([st["state"], ids], axis=1)), {
        "state": (st["state"] + ids + step) % STATES}

  def jax_step(ids, step, st):
    return jnp.asarray(table)[st["state"], ids], {"state": (st["state"] + ids + step) % STATES}

  state = {"state": np.arange(3, dtype=np.int32) % STATES}
  tf_rule, jax_rule = _ParityConstraint(tf, tf.range, VOCAB), _ParityConstraint(jnp, jnp.arange, VOCAB)
  tf_result = search.beam_search(tf_step, tf.zeros([3], tf.int32), state, 3, 0.6,
                                 tf.constant(lengths), 9, constraint=tf_rule,
                                 constraint_state=tf_rule.initial_state(3))
  jax_result = jax_search.beam_search(jax_step, jnp.zeros([3], jnp.int32), state, 3, 0.6,
                                      jnp.asarray(lengths), 9, constraint=jax_rule,
                                      constraint_state=jax_rule.initial_state(3))
  ids = tf_result.ids.numpy()
  np.testing.assert_array_equal(np.asarray(jax_result.ids), ids)
  np.testing.assert_allclose(np.asarray(jax_result.scores), tf_result.scores.numpy(), atol=1e-5)
  assert (tf_result.lengths.numpy() > 2).any()  # Hypotheses long enough to show the rule.
  # The rule held: consecutive tokens before the EOS alternate in parity.
  for row in ids.reshape(-1, ids.shape[-1]):
    body = list(row[:list(row).index(1)]) if 1 in row else []
    assert all((a + b) % 2 == 1 for a, b in zip([0] + body, body)), row


# Slow-marked (two processes, 31 s in CI): CI decodes the tiny Transformer with the JAX search
# against TensorFlow's under the word-tree constraint below (the same model step and cache),
# and the unconstrained JAX search against TensorFlow's in process (the tests above).
@pytest.mark.slow
def test_jax_decoder_decodes_the_tiny_transformer_as_tensorflows_decoder(tmp_path):
  weights = str(tmp_path / "weights.npz")
  out = {}
  for backend in ("tensorflow", "jax"):  # TensorFlow writes the weights, JAX loads them.
    path = str(tmp_path / f"{backend}.npz")
    printed = backend_python(backend, weights, path, "--decode")
    if backend == "jax":
      assert "tensorflow_loaded=False" in printed
    out[backend] = dict(np.load(path))
  np.testing.assert_array_equal(out["jax"]["ids"], out["tensorflow"]["ids"])
  np.testing.assert_allclose(out["jax"]["scores"], out["tensorflow"]["scores"], atol=1e-4)
  assert (out["tensorflow"]["ids"][:, 0] > 0).any()  # Real hypotheses, not empty slots.


def _valid_toy_tree(ids, source, target_words):
  """Is `ids` (no EOS) one tree over the toy labels, its words `source` (or one XX each)?"""
  from tests.backend_worker import TREE_PIECES
  stack, words = [], []
  for i in ids:
    token = TREE_PIECES[i][1:]
    if token in ("(A", "(B"):
      stack.append(token[1])
    elif token in (")A", ")B"):
      if not stack or stack.pop() != token[1]:
        return False
      if not stack and len(words) < len(source):
        return False  # A second top-level constituent would follow.
    elif stack:
      words.append(i)
    else:
      return False
  return not stack and words == (list(source) if target_words else [6] * len(source))


# The word-tree constraint (the parsing recipe's, tests/test_parsing_gpu.py, slow-marked) runs
# in CI; the XX-slot trees are slow-marked: CI runs the JAX search under a constraint in process
# against TensorFlow's (test_jax_beam_search_under_a_mask_constraint_...) as well.
@pytest.mark.parametrize("mode", [pytest.param("--decode_trees", marks=pytest.mark.slow),
                                  "--decode_word_trees"])
def test_jax_decoder_under_a_tree_constraint_returns_tensorflows_trees(tmp_path, mode):
  from tests.backend_worker import TREE_SOURCES
  weights = str(tmp_path / "weights.npz")
  out = {}
  for backend in ("tensorflow", "jax"):  # TensorFlow writes the weights, JAX loads them.
    path = str(tmp_path / f"{backend}.npz")
    printed = backend_python(backend, weights, path, mode)
    if backend == "jax":
      assert "tensorflow_loaded=False" in printed
    out[backend] = dict(np.load(path))
  np.testing.assert_array_equal(out["jax"]["ids"], out["tensorflow"]["ids"])
  np.testing.assert_allclose(out["jax"]["scores"], out["tensorflow"]["scores"], atol=1e-4)
  # The constraint is in force: every beam of every sentence is a tree over its words.
  for source, beams in zip(TREE_SOURCES, out["jax"]["ids"]):
    for ids in beams:
      ids = [int(i) for i in ids]
      ids = ids[:min(ids.index(end) if end in ids else len(ids) for end in (0, 1))]
      assert _valid_toy_tree(ids, source, mode == "--decode_word_trees"), (source, ids)


@pytest.mark.parametrize("setting", ["beam_size=1,sampling_method=random", "use_cache=false"])
def test_jax_decoder_refuses_what_only_tensorflows_search_does(setting):
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.jax_search import JaxDecoder
  from t2tlite.errors import UserError
  with pytest.raises(UserError, match="--decode_hparams: the JAX search has no"):
    JaxDecoder(None, DecodeHParams().override(setting))


def test_jax_decoder_refuses_constrain_trees_without_a_constraint():
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.jax_search import JaxDecoder
  from t2tlite.errors import UserError
  with pytest.raises(UserError, match="constrain_trees=true needs the problem's tree constraint"):
    JaxDecoder(None, DecodeHParams().override("constrain_trees=true"))
