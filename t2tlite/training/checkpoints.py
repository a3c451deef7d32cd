"""Checkpoint layout: model weights keyed by their Keras paths.

A Keras functional model reaches its layers through a positional
`_operations` list, so checkpointing the model object directly keys every
weight by an index that shifts whenever the graph changes (one added
`keras.ops` call renumbers every layer after it), and a later restore can
bind nothing, or worse, bind the wrong tensors. Here each weight is keyed by
its path ("encoder_layer_0/self_attention/query/kernel"), which only changes
when the architecture does. Dropout RNG states, whose Keras names carry a
process-wide counter, are keyed by their order in the model, so a resumed
run continues the same random streams.
"""

import hashlib

import tensorflow as tf


def model_trackable(model) -> tf.train.Checkpoint:
  """A trackable holding every variable of `model` under a stable name."""
  weights = model.weights
  weight_ids = {id(w) for w in weights}
  rng_states = [v for v in model.variables if id(v) not in weight_ids]
  named = {w.path: w for w in weights}
  if len(named) != len(weights):
    raise ValueError("model has duplicate weight paths; checkpoint keys would collide")
  named.update({f"rng_state_{i}": v for i, v in enumerate(rng_states)})
  return tf.train.Checkpoint(**named)


def write_model(model, prefix: str) -> str:
  """Writes a model-only checkpoint at exactly `prefix` (averaged/, best/); returns it.

  Checkpoint.restore (restore_model) creates a save_counter and asserts it was
  found, so the file needs one, as every CheckpointManager checkpoint has.
  write() adds no suffix.
  """
  root = tf.train.Checkpoint(model=model_trackable(model))
  root.save_counter.assign(1)
  return root.write(prefix)


def restore_model(model, path: str) -> None:
  """Restores only the model's variables from a training checkpoint; all must be found."""
  status = tf.train.Checkpoint(model=model_trackable(model)).restore(path)
  status.expect_partial().assert_existing_objects_matched()


def weights_checksum(model) -> str:
  """SHA-256 (first 16 hex digits) of every weight's path and bytes.

  Logged at the end of training: every worker of a multi-worker run must
  print the same value, and the chief's checkpoint reloads to it.
  """
  digest = hashlib.sha256()
  for weight in model.weights:
    digest.update(weight.path.encode())
    digest.update(weight.numpy().tobytes())
  return digest.hexdigest()[:16]
