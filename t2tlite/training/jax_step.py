"""The train and eval steps under the JAX backend: pure functions, `jax.jit`-compiled.

Keras 3's documented JAX training pattern: the model's and the optimizer's
variables are pulled out as lists of arrays (the *state*), one update is a
pure function `state, batch -> state, metric sums` built from
`model.stateless_call` and `optimizer.stateless_apply`, and `jax.jit`
compiles it. Between updates the state lives only in those arrays; it is
written back into the Keras variables (`write_to_model`) when something
outside the step reads them: a checkpoint, `best/`, the weights checksum.

The state crosses jit as a few stacks (`Stacks`): the arrays of one dtype and
shape stacked along a new leading axis, so transformer_base's 594 arrays (181
weights, 362 Adam moments, 50 dropout seed states, `iterations`) become 20.
A call's host cost grows with its argument count, and where a step takes tens
of milliseconds on a GPU that cost is a share of the step whenever the host
waits for its result. A weight is a static index into its stack, a slice of
whole leading rows that XLA fuses into the weight's cast to the compute dtype;
Adam runs over whole stacks, so the update slices nothing apart. On an H200
(bench/README.md, "the state as stacks"; base shape, length 64) the stacks beat
Adam's moments as 1-D buffers in one process by 1.043-1.046x with a host sync
per step (call 3.4 -> 2.0 ms) and 1.02x pipelined. History: the whole state as
1-D buffers per dtype (reverted 3b2247a) cost more GPU time than it saved, its
weights sliced at arbitrary offsets and its updates concatenated from ~560
pieces; Adam's moments alone as 1-D buffers (b643791) cut the call from 7.2 to
3.5 ms.

Same mathematics as the TensorFlow step (train_step.py), so the two
backends train the same model:
* loss: the label-smoothed token loss (losses.py) summed over the batch's
  real target tokens and divided by that global count;
* `accumulate_steps` = N: the batch holds N micro-batches of one bucket
  shape; a `lax.scan` sums their gradients, one optimizer update follows
  (the Noam step counts updates);
* the global gradient norm is reported, and clipped by when
  `clip_grad_norm` > 0 (tf.clip_by_global_norm's formula);
* Adam and the Noam schedule are the Keras optimizer of optimization.py: its
  schedule, betas and epsilon, and Keras's Adam formula written on the
  stacks (`adam_update`; tests/test_jax_stacked_state.py ties it to Keras's own
  `stateless_apply`, bit for bit), so `iterations` and both moments are in
  the state;
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


class Stacks:
  """A list of arrays <-> a tuple of stacks: the arrays of one dtype and shape, in list order.

  The layout is fixed by the arrays given at construction (dtype and shape of
  each); stacks come in order of first appearance. `pack` and `unpack` work
  inside and outside jit and move data only; `unpack` indexes whole leading
  rows, so each array is a contiguous piece of its stack.
  """

  def __init__(self, arrays):
    keys = []  # Per stack: (dtype, shape).
    self.members = []  # Per stack: the indices of its arrays, in list order.
    self.layout = []  # Per array: (stack index, row).
    for j, array in enumerate(arrays):
      key = (jnp.dtype(array.dtype), tuple(array.shape))
      if key not in keys:
        keys.append(key)
        self.members.append([])
      index = keys.index(key)
      self.layout.append((index, len(self.members[index])))
      self.members[index].append(j)

  def pack(self, arrays) -> tuple:
    if len(arrays) != len(self.layout):
      raise ValueError(f"Stacks.pack: {len(arrays)} arrays, the layout has {len(self.layout)}")
    return tuple(jnp.stack([arrays[j] for j in members]) for members in self.members)

  def unpack(self, stacks) -> list:
    return [stacks[index][row] for index, row in self.layout]


def rate_at(optimizer, iterations):
  """The optimizer's learning rate at `iterations` updates: its schedule's value, or its float."""
  rate = optimizer._learning_rate  # The schedule, or a float (learning_rate_schedule).
  return rate(iterations) if callable(rate) else rate


def adam_update(optimizer, weights, grads, iterations, moments, velocities):
  """Keras's Adam on stacks: (new weights, new moments, new velocities), each a tuple of stacks.

  m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2), w -= m alpha / (sqrt(v) + eps) with
  alpha = lr sqrt(1 - b2^t) / (1 - b1^t), t = iterations + 1 and lr the optimizer's
  schedule at `iterations`: keras.optimizers.Adam.update_step, op for op, elementwise, so
  it applies to stacks of weights (one Stacks layout for all four) as to single weights.
  """
  grads = [g.astype(w.dtype) for g, w in zip(grads, weights)]
  moments = [m + (g - m) * (1 - optimizer.beta_1) for m, g in zip(moments, grads)]
  velocities = [v + (jnp.square(g) - v) * (1 - optimizer.beta_2)
                for v, g in zip(velocities, grads)]
  rate = rate_at(optimizer, iterations)
  alphas = {}  # Per weight dtype: one scalar for every weight of it.
  for dtype in {jnp.dtype(w.dtype) for w in weights}:
    step = (iterations + 1).astype(dtype)
    beta_1_power = jnp.power(jnp.asarray(optimizer.beta_1, dtype), step)
    beta_2_power = jnp.power(jnp.asarray(optimizer.beta_2, dtype), step)
    alphas[dtype] = jnp.asarray(rate, dtype) * jnp.sqrt(1 - beta_2_power) / (1 - beta_1_power)
  return (tuple(w - (m * alphas[jnp.dtype(w.dtype)]) / (jnp.sqrt(v) + optimizer.epsilon)
                for w, m, v in zip(weights, moments, velocities)),
          tuple(moments), tuple(velocities))


class JaxTrainer:
  """Holds the training state as arrays and applies compiled updates to it.

  `state` = (weights, seed states, (iterations, moments, velocities)): the
  weights (`model.trainable_variables`), Adam's moments and velocities (one
  layout, the weights') and the seed states (`model.non_trainable_variables`)
  as tuples of `Stacks`.
  """

  def __init__(self, model, optimizer, hparams, distribution=None, compiler_options=None):
    """`compiler_options`: XLA options for compiling the train step (XLA_FLAGS' names, e.g.
    {"xla_gpu_enable_command_buffer": ""}), so that variants compare in one process
    (bench/jax_step_variants.py); None keeps the process's."""
    if hparams.dtype == "mixed_float16":
      raise JaxStepError("--hparams=dtype=mixed_float16: dynamic loss scaling is in the "
                         "TensorFlow step only; use mixed_bfloat16 (no scaling needed) or "
                         "float32 under --backend=jax")
    if (not isinstance(optimizer, keras.optimizers.Adam) or optimizer.amsgrad or optimizer.use_ema
        or optimizer.weight_decay or optimizer.clipnorm or optimizer.clipvalue
        or optimizer.global_clipnorm):
      raise JaxStepError("the JAX step applies plain Adam (optimization.make_optimizer), got "
                         f"{type(optimizer).__name__} with other settings")
    self.model = model
    self.optimizer = optimizer
    self.hparams = hparams
    self.distribution = distribution
    self.train_traces = 0
    self.eval_traces = 0
    self._weights = Stacks(model.trainable_variables)
    self._seeds = Stacks(model.non_trainable_variables)
    self.read_from_model()
    # The state's old buffers are reused for the new one (no second copy on the device).
    self._train = jax.jit(self._train_step, donate_argnums=(0,),
                          compiler_options=compiler_options)
    self._eval = jax.jit(self._eval_step)

  # --- State <-> Keras variables ---
  def read_from_model(self) -> None:
    """Takes the state from the Keras variables (after building, restoring, warm starting)."""
    copy = lambda v: jnp.array(v.value, copy=True)  # noqa: E731 - donated later: own buffers.
    opt, layout = self.optimizer, self._weights
    self.state = (layout.pack([copy(v) for v in self.model.trainable_variables]),
                  self._seeds.pack([copy(v) for v in self.model.non_trainable_variables]),
                  (copy(opt.iterations), layout.pack([copy(m) for m in opt._momentums]),
                   layout.pack([copy(v) for v in opt._velocities])))
    # Kept on the host too: every update adds one (mixed_float16's skipped updates are refused
    # above), so reading the step does not wait for the device at every update.
    self._iterations = int(opt.iterations.value)

  def write_to_model(self) -> None:
    """Writes the state into the Keras variables (copies: the next update donates the state)."""
    weights, seeds, (iterations, moments, velocities) = self.state
    opt = self.optimizer
    for variables, values in ((self.model.trainable_variables, self._weights.unpack(weights)),
                              (self.model.non_trainable_variables, self._seeds.unpack(seeds)),
                              (opt._momentums, self._weights.unpack(moments)),
                              (opt._velocities, self._weights.unpack(velocities)),
                              ([opt.iterations], [iterations])):
      for variable, value in zip(variables, values):
        variable.assign(jnp.array(value, copy=True))

  @property
  def iterations(self) -> int:
    """Updates applied so far (the optimizer's `iterations`, in the state)."""
    return self._iterations

  def learning_rate(self) -> float:
    """The rate of the next update: the schedule at the state's `iterations`."""
    return float(rate_at(self.optimizer, self.iterations))

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
    weights, seeds, _ = self.state
    return self._eval(weights, seeds, self.shard_batch(batch))

  def _loss(self, trainable, non_trainable, batch, global_tokens):
    logits, non_trainable = self.model.stateless_call(trainable, non_trainable, batch,
                                                      training=True)
    sums = losses.token_loss_sums(logits, batch["targets"], self.hparams.label_smoothing,
                                  batch.get("targets_segmentation"))
    return sums.loss / global_tokens, (non_trainable, _sums(sums))

  def _train_step(self, state, batch):
    self.train_traces += 1  # Runs at trace time only: one per compiled batch shape.
    weights, seeds, (iterations, moments, velocities) = state
    # Sliced outside the gradient: its transpose would scatter every weight's gradient into a
    # zeroed copy of the whole stack.
    trainable = self._weights.unpack(weights)
    non_trainable = self._seeds.unpack(seeds)
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
    grads = self._weights.pack(grads)  # jax.grad gives each weight's gradient its dtype.
    grad_norm = global_norm(grads)
    if self.hparams.clip_grad_norm > 0:
      grads = clip_by_global_norm(grads, self.hparams.clip_grad_norm, grad_norm)
    weights, moments, velocities = adam_update(self.optimizer, weights, grads, iterations,
                                               moments, velocities)
    return ((weights, self._seeds.pack(non_trainable), (iterations + 1, moments, velocities)),
            dict(sums, grad_norm=grad_norm))

  def _eval_step(self, weights, seeds, batch):
    self.eval_traces += 1
    logits, _ = self.model.stateless_call(self._weights.unpack(weights),
                                          self._seeds.unpack(seeds), batch, training=False)
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
