"""One backend's numbers for tests/test_backends.py: run as a script under KERAS_BACKEND=X.

    python tests/backend_worker.py WEIGHTS.npz OUT.npz [--decode | --decode_trees | --decode_word_trees]

Builds the tiny Transformer (float32, no dropout) on the backend that
KERAS_BACKEND names; if WEIGHTS.npz exists, loads every weight from it by its
Keras path (the set of paths must match exactly), else writes its own
initial weights there. Then, on a fixed batch with source and target padding
(the decoder's causal mask always applies), writes to OUT.npz the logits,
the label-smoothed loss per real target token and the gradient of that loss
for every trainable weight ("grad:" + path). With --decode it writes instead
the beams of a beam search over DECODE_SOURCES: t2tlite's Decoder under
TensorFlow, jax_search.JaxDecoder under JAX; with --decode_trees the same
search under a tree constraint over a toy labelling of the 20 ids (TREE_PIECES:
brackets of two labels, XX, every other id a word), with --decode_word_trees
the constraint whose word slots take the source's own ids. Imports only the keras core and
this backend's framework (and the backend's search), so under JAX it also
shows the core runs without TensorFlow.
"""

import os
import sys

import keras
import numpy as np

from t2tlite.hparams import transformer as hparams_sets
from t2tlite.models.transformer import Transformer
from t2tlite.training import losses

LABEL_SMOOTHING = 0.1
WEIGHT_SEED = 3


def tiny_model():
  """The tests' tiny shape (tests/helpers.py TINY_SHAPE), built without the problem registry."""
  hp = hparams_sets.transformer_tiny().replace(
      input_vocab_size=20, target_vocab_size=20, d_model=32, d_ff=64, num_heads=4,
      dropout=0.0, attention_dropout=0.0, relu_dropout=0.0, dtype="float32")
  return Transformer(hp)


def fixed_batch():
  """3 sentences; sources of 7, 4 and 2 ids and targets of 5, 3 and 1 (each ending in EOS=1)."""
  rng = np.random.RandomState(0)
  batch = {}
  for name, length, real in (("inputs", 7, (7, 4, 2)), ("targets", 5, (5, 3, 1))):
    ids = rng.randint(2, 20, size=(3, length)).astype(np.int32)
    for row, n in enumerate(real):
      ids[row, n - 1] = 1
      ids[row, n:] = 0
    batch[name] = ids
  return batch


def mean_loss(logits, targets):
  sums = losses.token_loss_sums(logits, targets, LABEL_SMOOTHING)
  return sums.loss / sums.tokens


def logits_loss_gradients(model, batch):
  """(logits, loss, [gradient per trainable weight]) on the backend in use."""
  backend = keras.config.backend()
  if backend == "tensorflow":
    import tensorflow as tf
    with tf.GradientTape() as tape:
      logits = model(batch, training=False)
      loss = mean_loss(logits, batch["targets"])
    return logits, loss, tape.gradient(loss, model.trainable_variables)
  if backend == "jax":
    import jax

    def loss_fn(trainable, non_trainable):
      logits, _ = model.stateless_call(trainable, non_trainable, batch, training=False)
      return mean_loss(logits, batch["targets"]), logits

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    # Compiled whole, as the JAX trainer's step is: run op by op, JAX compiles each op on its
    # own (this process took 24.6 s that way, 10.7 s jitted and without an eager build call).
    (loss, logits), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(
        trainable, non_trainable)
    return logits, loss, grads
  raise SystemExit(f"backend_worker: no gradient recipe for backend {backend!r}")


# Sources of several lengths (one batch of width 8, one of 16: two compiled shapes), ids 2-19.
DECODE_SOURCES = [[5, 7, 9], [2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [12], [19, 18, 17, 16, 15, 14, 13],
                  [4, 4, 4, 4], [6, 11, 2, 8, 15]]
DECODE_HPARAMS = "beam_size=3,alpha=0.6,extra_length=6,return_beams=true,batch_tokens=40"


# The tiny model's 20 ids read as a parser's vocabulary: pad, EOS, two labels' brackets, XX,
# and words (ids 7-19, each a word of its own; DECODE_SOURCES then have as many words as ids).
TREE_PIECES = ["<pad>", "</s>", "\u2581(A", "\u2581(B", "\u2581)A", "\u2581)B", "\u2581XX"] + [
    f"\u2581w{i}" for i in range(7, 20)]
TREE_SOURCES = [[i for i in source if i >= 7] or [7] for source in DECODE_SOURCES]


def tree_constraint(target_words):
  """Every state field and rule in play: depth 3, runs of 2, no unary repeat, words or XX."""
  from t2tlite.decoding.tree_constraint import TreeConstraint
  starts = [i >= 7 for i in range(len(TREE_PIECES))]
  return TreeConstraint(TREE_PIECES, starts, eos_id=1, max_depth=3, target_words=target_words,
                        max_open_run=2, no_unary_repeat=True)


def decode_beams(model, mode="--decode"):
  """{"ids": [sources, beam, width], "scores": [sources, beam]} of this backend's beam search."""
  from t2tlite.decoding.decode_hparams import DecodeHParams
  hp = DecodeHParams().override(DECODE_HPARAMS)
  sources, constraint = DECODE_SOURCES, None
  if mode in ("--decode_trees", "--decode_word_trees"):
    sources, constraint = TREE_SOURCES, tree_constraint(mode == "--decode_word_trees")
    hp = hp.override("constrain_trees=true")
  if keras.config.backend() == "jax":
    from t2tlite.decoding.jax_search import JaxDecoder
    nbest = JaxDecoder(model, hp, constraint).decode_nbest(sources)
  else:
    from t2tlite.decoding.decoder import Decoder
    nbest = Decoder(model, hp, constraint).decode_nbest(sources)
  ids = np.zeros([len(nbest), hp.beam_size, 32], np.int32)
  scores = np.zeros([len(nbest), hp.beam_size], np.float32)
  for i, beams in enumerate(nbest):
    for k, (tokens, score) in enumerate(beams):
      ids[i, k, :len(tokens)] = tokens
      scores[i, k] = score
  return {"ids": ids, "scores": scores}


def full_float32_matmuls():
  """float32 matmuls computed in float32 on every host, so the two backends can agree to 1e-4.

  Left to their defaults, either backend may round a float32 matmul's inputs on
  some hosts (TensorFlow's TensorFloat-32 setting, oneDNN's math mode on CPUs
  with bfloat16 units; JAX's default precision): a 0.6% difference in one
  gradient was seen on such a host. The caller also sets
  ONEDNN_DEFAULT_FPMATH_MODE=STRICT (tests/test_backends.py).
  """
  if keras.config.backend() == "tensorflow":
    import tensorflow as tf
    tf.config.experimental.enable_tensor_float_32_execution(False)
  elif keras.config.backend() == "jax":
    import jax
    jax.config.update("jax_default_matmul_precision", "highest")


def main(weights_path, out_path, mode=""):
  full_float32_matmuls()
  if not os.path.exists(weights_path):
    # Seeded, so the weights written are the same every run: with some random initializations
    # the untrained model ends every beam at once, and a decode compares nothing. (Only the
    # writer seeds: under JAX, keras.utils.set_random_seed would import TensorFlow.)
    keras.utils.set_random_seed(WEIGHT_SEED)
  model = tiny_model()  # Functional: every weight is built here, without a call.
  batch = fixed_batch()
  paths = [w.path for w in model.weights]
  assert len(set(paths)) == len(paths), "weight paths are not unique"
  if os.path.exists(weights_path):
    saved = np.load(weights_path)
    if sorted(saved.files) != sorted(paths):
      raise SystemExit(f"weight paths differ: only saved {sorted(set(saved.files) - set(paths))}, "
                       f"only here {sorted(set(paths) - set(saved.files))}")
    for w in model.weights:
      w.assign(saved[w.path])
  else:
    np.savez(weights_path, **{w.path: keras.ops.convert_to_numpy(w.value) for w in model.weights})
  if mode.startswith("--decode"):
    out = decode_beams(model, mode)
  else:
    out = gradients_out(model, batch)
  np.savez(out_path, **out)
  tensorflow_loaded = any(m == "tensorflow" or m.startswith("tensorflow.") for m in sys.modules)
  print(f"backend={keras.config.backend()} tensorflow_loaded={tensorflow_loaded}")


def gradients_out(model, batch):
  logits, loss, grads = logits_loss_gradients(model, batch)
  out = {"logits": keras.ops.convert_to_numpy(logits), "loss": keras.ops.convert_to_numpy(loss)}
  for w, g in zip(model.trainable_variables, grads):
    out["grad:" + w.path] = keras.ops.convert_to_numpy(g)
  return out


if __name__ == "__main__":
  main(*sys.argv[1:4])
