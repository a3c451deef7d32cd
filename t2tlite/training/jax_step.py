"""The train and eval steps under the JAX backend: pure functions, `jax.jit`-compiled.

Keras 3's documented JAX training pattern: the model's and the optimizer's
variables are pulled out as lists of arrays (the *state*), one update is a
pure function `state, batch -> state, metric sums` built from
`model.stateless_call` and `optimizer.stateless_apply`, and `jax.jit`
compiles it. Between updates the state lives only in those arrays; it is
written back into the Keras variables (`write_to_model`) when something
outside the step reads them: a checkpoint, `best/`, the weights checksum.

Same mathematics as the TensorFlow step (train_step.py), so the two
backends train the same model:
* loss: the label-smoothed token loss (losses.py) summed over the batch's
  real target tokens and divided by that global count;
* `accumulate_steps` = N: the batch holds N micro-batches of one bucket
  shape; a `lax.scan` sums their gradients, one optimizer update follows
  (the Noam step counts updates);
* the global gradient norm is reported, and clipped by when
  `clip_grad_norm` > 0 (tf.clip_by_global_norm's formula);
* Adam and the Noam schedule are the Keras optimizer of optimization.py,
  applied statelessly, so `iterations` and both moments are in the state;
* dropout draws from the Keras seed generators, whose states are among the
  model's non-trainable variables: `stateless_call` returns them advanced.

Compilation: jit traces once per batch shape; the training batches come in a
fixed shape per length bucket (input_pipeline.py), so there is one trace per
bucket at most. `traces` counts them for the trainer's log.

Several devices: under `keras.distribution.DataParallel` the variables are
replicated and each batch is sharded along its rows (`shard_batch`); jit
then partitions the same function and inserts the all-reduces itself.

dtype=mixed_float16 (dynamic loss scaling) is TensorFlow-only here;
mixed_bfloat16 needs no scaling and runs as is.
"""

import math

import jax
import jax.numpy as jnp
import keras
import numpy as np

from t2tlite.constants import PAD_ID
from t2tlite.errors import UserError
from t2tlite.training import losses

METRIC_KEYS = ("loss", "nll", "tokens", "correct", "sequences", "correct_sequences")


class JaxStepError(UserError):
  """A setting the JAX step does not support; one line naming the hparam."""


def _sums(sums: losses.TokenLossSums) -> dict:
  return {key: getattr(sums, key) for key in METRIC_KEYS}


def global_norm(arrays) -> jax.Array:
  """sqrt of the sum of squares of every entry (tf.linalg.global_norm), float32."""
  return jnp.sqrt(sum(jnp.sum(jnp.square(a.astype(jnp.float32))) for a in arrays))


def clip_by_global_norm(grads, clip_norm, norm):
  """tf.clip_by_global_norm: g * clip_norm / max(norm, clip_norm)."""
  scale = clip_norm / jnp.maximum(norm, clip_norm)
  return [(g * scale).astype(g.dtype) for g in grads]


class JaxTrainer:
  """Holds the training state as arrays and applies compiled updates to it.

  `state` = (trainable, non_trainable, optimizer variables), each a list in
  the order of `model.trainable_variables`, `model.non_trainable_variables`
  and `optimizer.variables`.
  """

  def __init__(self, model, optimizer, hparams, distribution=None):
    if hparams.dtype == "mixed_float16":
      raise JaxStepError("--hparams=dtype=mixed_float16: dynamic loss scaling is in the "
                         "TensorFlow step only; use mixed_bfloat16 (no scaling needed) or "
                         "float32 under --backend=jax")
    self.model = model
    self.optimizer = optimizer
    self.hparams = hparams
    self.distribution = distribution
    self.train_traces = 0
    self.eval_traces = 0
    self._iterations_index = next(i for i, v in enumerate(optimizer.variables)
                                  if v is optimizer.iterations)
    self.read_from_model()
    # The state's old buffers are reused for the new one (no second copy on the device).
    self._train = jax.jit(self._train_step, donate_argnums=(0,))
    self._eval = jax.jit(self._eval_step)

  # --- State <-> Keras variables ---
  def read_from_model(self) -> None:
    """Takes the state from the Keras variables (after building, restoring, warm starting)."""
    copy = lambda v: jnp.array(v.value, copy=True)  # noqa: E731 - donated later: own buffers.
    self.state = ([copy(v) for v in self.model.trainable_variables],
                  [copy(v) for v in self.model.non_trainable_variables],
                  [copy(v) for v in self.optimizer.variables])
    # Kept on the host too: every update adds one (mixed_float16's skipped updates are refused
    # above), so reading the step does not wait for the device at every update.
    self._iterations = int(self.state[2][self._iterations_index])

  def write_to_model(self) -> None:
    """Writes the state into the Keras variables (copies: the next update donates the state)."""
    trainable, non_trainable, optimizer_vars = self.state
    for variables, values in ((self.model.trainable_variables, trainable),
                              (self.model.non_trainable_variables, non_trainable),
                              (self.optimizer.variables, optimizer_vars)):
      for variable, value in zip(variables, values):
        variable.assign(jnp.array(value, copy=True))

  @property
  def iterations(self) -> int:
    """Updates applied so far (the optimizer's `iterations`, in the state)."""
    return self._iterations

  def learning_rate(self) -> float:
    """The rate of the next update: the schedule at the state's `iterations`."""
    rate = self.optimizer._learning_rate  # The schedule, or a float (learning_rate_schedule).
    if callable(rate):
      return float(rate(self.iterations))
    return float(rate)

  # --- Batches ---
  def shard_batch(self, batch: dict) -> dict:
    """numpy {"inputs", "targets"} -> device arrays, split by rows over the data-parallel devices."""
    if self.distribution is None:
      return {k: jnp.asarray(v) for k, v in batch.items()}
    return {k: keras.distribution.distribute_tensor(
        np.asarray(v), self.distribution.get_data_layout(np.shape(v))) for k, v in batch.items()}

  # --- The steps ---
  def train_step(self, batch: dict) -> dict:
    """One update on a global batch (numpy); returns its metric sums (device scalars)."""
    self.state, sums = self._train(self.state, self.shard_batch(batch))
    self._iterations += 1
    return sums

  def eval_step(self, batch: dict) -> dict:
    """Teacher-forced metric sums of a batch, without dropout; the state is unchanged."""
    trainable, non_trainable, _ = self.state
    return self._eval(trainable, non_trainable, self.shard_batch(batch))

  def _loss(self, trainable, non_trainable, batch, global_tokens):
    logits, non_trainable = self.model.stateless_call(trainable, non_trainable, batch,
                                                      training=True)
    sums = losses.token_loss_sums(logits, batch["targets"], self.hparams.label_smoothing,
                                  batch.get("targets_segmentation"))
    return sums.loss / global_tokens, (non_trainable, _sums(sums))

  def _train_step(self, state, batch):
    self.train_traces += 1  # Runs at trace time only: one per compiled batch shape.
    trainable, non_trainable, optimizer_vars = state
    targets = batch["targets"]
    global_tokens = jnp.maximum(jnp.sum((targets != PAD_ID).astype(jnp.float32)), 1.0)
    grad_fn = jax.grad(self._loss, has_aux=True)
    num_micro = self.hparams.accumulate_steps
    if num_micro == 1:
      grads, (non_trainable, sums) = grad_fn(trainable, non_trainable, batch, global_tokens)
    else:
      # Rows [R * N * b] (replica r holds rows r*N*b..., as in the TF step) -> [N, R * b].
      replicas = device_count(self.distribution)

      def micro_batches(x):
        rows, length = x.shape
        x = x.reshape(replicas, num_micro, rows // (replicas * num_micro), length)
        return x.transpose(1, 0, 2, 3).reshape(num_micro, rows // num_micro, length)

      micro = {k: micro_batches(v) for k, v in batch.items()}

      def body(carry, micro_batch):
        grads, non_trainable, sums = carry
        g, (non_trainable, s) = grad_fn(trainable, non_trainable, micro_batch, global_tokens)
        return ([a + b for a, b in zip(grads, g)], non_trainable,
                {k: sums[k] + s[k] for k in METRIC_KEYS}), None

      zeros = ([jnp.zeros_like(v) for v in trainable], non_trainable,
               {k: jnp.zeros((), jnp.float32) for k in METRIC_KEYS})
      (grads, non_trainable, sums), _ = jax.lax.scan(body, zeros, micro)
    grad_norm = global_norm(grads)
    if self.hparams.clip_grad_norm > 0:
      grads = clip_by_global_norm(grads, self.hparams.clip_grad_norm, grad_norm)
    trainable, optimizer_vars = self.optimizer.stateless_apply(optimizer_vars, grads, trainable)
    return (trainable, non_trainable, optimizer_vars), dict(sums, grad_norm=grad_norm)

  def _eval_step(self, trainable, non_trainable, batch):
    self.eval_traces += 1
    logits, _ = self.model.stateless_call(trainable, non_trainable, batch, training=False)
    return _sums(losses.token_loss_sums(logits, batch["targets"], self.hparams.label_smoothing,
                                        batch.get("targets_segmentation")))


def data_parallel():
  """keras.distribution.DataParallel over every JAX device, set globally; None with one device.

  Set before the model is built, so its variables are created replicated.
  """
  devices = jax.devices()
  if len(devices) < 2:
    return None
  distribution = keras.distribution.DataParallel(devices=devices)
  keras.distribution.set_distribution(distribution)
  return distribution


def device_count(distribution) -> int:
  return 1 if distribution is None else int(math.prod(distribution.device_mesh.shape))
