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

Under another Keras backend (JAX) the variables hold that backend's arrays,
which TensorFlow cannot save: a `VariableMirror` stands in for them, one
tf.Variable per variable under the same key, filled from numpy before a
save and copied back after a restore, so the files are exactly those of a
TensorFlow run (t2t-decoder, t2t-avg-all and the exporter read them
unchanged). Seed-generator states are saved in TensorFlow's seed dtype
(int64; JAX's is uint32). Without TensorFlow at all, npz_checkpoints.py
writes the same keys into an .npz, and `restore_model` reads either.
"""

import hashlib

from t2tlite.training.weight_keys import RNG_PREFIX, named_variables, to_numpy

TF_SEED_DTYPE = "int64"  # keras.backend.random_seed_dtype() under TensorFlow.


def on_tensorflow() -> bool:
  """Whether Keras runs on TensorFlow (its variables are then trackable as they are)."""
  import keras
  return keras.config.backend() == "tensorflow"


class VariableMirror:
  """tf.Variables in place of another backend's Keras variables, under the same keys.

  `trackable` goes into a tf.train.Checkpoint; `pull()` before saving copies
  the Keras values in, `push()` after restoring copies them back out.
  """

  def __init__(self, named: dict, seed_keys=()):
    import tensorflow as tf
    self.named = named
    self.seed_keys = set(seed_keys)
    self.mirrors = {}
    for key, variable in named.items():
      value = to_numpy(variable)
      if key in self.seed_keys:
        value = value.astype(TF_SEED_DTYPE)
      self.mirrors[key] = tf.Variable(value, trainable=False, name=key.replace("/", "_"))
    self.trackable = tf.train.Checkpoint(**self.mirrors)

  def pull(self) -> None:
    """Keras variables -> mirrors (before a save)."""
    for key, variable in self.named.items():
      self.mirrors[key].assign(to_numpy(variable).astype(self.mirrors[key].dtype.as_numpy_dtype))

  def push(self) -> None:
    """Mirrors -> Keras variables (after a restore)."""
    for key, variable in self.named.items():
      variable.assign(self.mirrors[key].numpy().astype(variable.dtype))


class OptimizerMirror(VariableMirror):
  """The optimizer's variables (iterations, Adam's moments) as the list optimizer/variables/<i>.

  In `optimizer.variables` order, which names them the same way on every
  backend. (Keras's TensorFlow optimizer checkpoints another object graph,
  so a run resumes under the backend it was started with; run.json records
  it. The model's keys, all that decoding reads, are the same.)
  """

  def __init__(self, optimizer):
    super().__init__({str(i): v for i, v in enumerate(optimizer.variables)})
    import tensorflow as tf
    self.trackable = tf.train.Checkpoint(
        variables=[self.mirrors[str(i)] for i in range(len(self.mirrors))])


def model_mirror(model) -> VariableMirror:
  named = named_variables(model)
  return VariableMirror(named, [k for k in named if k.startswith(RNG_PREFIX)])


def optimizer_mirror(optimizer) -> VariableMirror:
  return OptimizerMirror(optimizer)


def model_trackable(model):
  """A trackable holding every variable of `model` under a stable name (TensorFlow backend)."""
  import tensorflow as tf
  return tf.train.Checkpoint(**named_variables(model))


def write_model(model, prefix: str) -> str:
  """Writes a model-only checkpoint at exactly `prefix` (averaged/, best/); returns it.

  Checkpoint.restore (restore_model) creates a save_counter and asserts it was
  found, so the file needs one, as every CheckpointManager checkpoint has.
  write() adds no suffix. Without TensorFlow: `prefix`.npz (npz_checkpoints.py).
  """
  from t2tlite import backends
  if not on_tensorflow() and not backends.tensorflow_available():
    from t2tlite.training import npz_checkpoints
    return npz_checkpoints.write_model(model, prefix)
  import tensorflow as tf
  if on_tensorflow():
    root = tf.train.Checkpoint(model=model_trackable(model))
  else:
    mirror = model_mirror(model)
    mirror.pull()
    root = tf.train.Checkpoint(model=mirror.trackable)
  root.save_counter.assign(1)
  return root.write(prefix)


def restore_model(model, path: str) -> None:
  """Restores only the model's variables from a training checkpoint; all must be found.

  Reads TensorFlow checkpoints on any backend, and the .npz ones a run
  without TensorFlow wrote (npz_checkpoints.py).
  """
  from t2tlite.training import npz_checkpoints
  if npz_checkpoints.is_npz(path):
    npz_checkpoints.restore_model(model, path)
    return
  import tensorflow as tf
  if on_tensorflow():
    status = tf.train.Checkpoint(model=model_trackable(model)).restore(path)
    status.expect_partial().assert_existing_objects_matched()
    return
  mirror = model_mirror(model)
  status = tf.train.Checkpoint(model=mirror.trackable).restore(path)
  status.expect_partial().assert_existing_objects_matched()
  mirror.push()


def weights_checksum(model) -> str:
  """SHA-256 (first 16 hex digits) of every weight's path and bytes.

  Logged at the end of training: every worker of a multi-worker run must
  print the same value, and the chief's checkpoint reloads to it.
  """
  digest = hashlib.sha256()
  for weight in model.weights:
    digest.update(weight.path.encode())
    digest.update(to_numpy(weight).tobytes())
  return digest.hexdigest()[:16]
