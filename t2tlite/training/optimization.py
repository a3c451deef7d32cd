"""Learning-rate schedule and optimizer (Section 5.3).

Noam: lrate = constant * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),
with step counted from 1 (the optimizer's `iterations` counts from 0, so the
first update uses step 1; step 0 would be 0 / infinity). `iterations` counts
optimizer updates, so with gradient accumulation the schedule advances once
per N micro-batches, as it would with one N-times-larger batch.
An option the paper lacks: `learning_rate_decay_steps` multiplies the schedule by
tensor2tensor's `linear_decay` factor, min(1, max(0, (train_steps - step) / decay_steps)),
so the rate falls linearly to zero over the run's last decay_steps updates (a run bounded
by steps or by a known step budget; 0, the default, keeps the paper's schedule).
Written in keras.ops, every Keras backend; under TensorFlow only, the Adam update
is TensorFlow's fused kernel (imported there, where it is loaded already).
"""

import keras
from keras import ops

from t2tlite.errors import UserError


def _update_number(iterations):
  """The step a schedule is read at: the update about to be made, counted from 1."""
  return ops.cast(iterations, "float32") + 1.0


@keras.saving.register_keras_serializable(package="t2tlite")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup for `warmup_steps`, then decay with the inverse square root of the step."""

  def __init__(self, d_model, warmup_steps=4000, constant=1.0):
    self.d_model = d_model
    self.warmup_steps = warmup_steps
    self.constant = constant

  def __call__(self, iterations):
    step = _update_number(iterations)
    warmup = float(self.warmup_steps)
    return (self.constant * self.d_model ** -0.5 *
            ops.minimum(ops.rsqrt(step), step * warmup ** -1.5))

  def get_config(self):
    return {"d_model": self.d_model, "warmup_steps": self.warmup_steps,
            "constant": self.constant}


@keras.saving.register_keras_serializable(package="t2tlite")
class LinearDecaySchedule(keras.optimizers.schedules.LearningRateSchedule):
  """`base` times tensor2tensor's linear_decay factor: 1 until `decay_steps` updates before
  `train_steps`, then linearly down to 0 at `train_steps` (t2t's learning_rate.py).

  A fixed step budget is spent better ending at a rate near zero than at the rsqrt
  decay's 1/sqrt(train_steps / warmup) of the peak; the base keeps its warmup.
  `base` is a schedule or a float (the "constant" schedule).
  """

  def __init__(self, base, decay_steps, train_steps):
    self.base = base
    self.decay_steps = decay_steps
    self.train_steps = train_steps

  def __call__(self, iterations):
    step = _update_number(iterations)
    factor = ops.clip((float(self.train_steps) - step) / float(self.decay_steps), 0.0, 1.0)
    base = self.base(iterations) if callable(self.base) else self.base
    return base * factor

  def get_config(self):
    base = (keras.optimizers.schedules.serialize(self.base) if callable(self.base)
            else self.base)
    return {"base": base, "decay_steps": self.decay_steps, "train_steps": self.train_steps}

  @classmethod
  def from_config(cls, config):
    base = config["base"]
    if isinstance(base, dict):
      base = keras.optimizers.schedules.deserialize(base)
    return cls(base, config["decay_steps"], config["train_steps"])


def learning_rate_schedule(hparams, train_steps=None):
  """The schedule the hparams name (`learning_rate_schedule`), with the linear decay to
  `train_steps` (the run's last update) when `learning_rate_decay_steps` asks for it."""
  if hparams.learning_rate_schedule == "noam":
    schedule = NoamSchedule(hparams.d_model, hparams.learning_rate_warmup_steps,
                            hparams.learning_rate_constant)
  else:
    schedule = hparams.learning_rate_constant
  if not hparams.learning_rate_decay_steps:
    return schedule
  if not train_steps:
    raise UserError(f"learning_rate_decay_steps={hparams.learning_rate_decay_steps} needs "
                    "--train_steps, the step its linear decay ends at")
  return LinearDecaySchedule(schedule, hparams.learning_rate_decay_steps, train_steps)


class PreReducedAdam(keras.optimizers.Adam):
  """Adam that applies gradients already summed over replicas.

  Under tf.distribute, Keras's optimizer all-reduces (sums) the gradients it
  is given. train_step.py needs the summed gradients *before* that, to take
  the global norm and clip by it, so it all-reduces them itself, once, and
  this optimizer skips its own second all-reduce (which would double every
  gradient). tests/test_distribute.py checks the update against one device.
  """

  def _all_reduce_sum_gradients(self, grads_and_vars):
    return grads_and_vars

  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    """One update: its scalars (ResourceApplyAdam's powers and casts) made once per dtype
    and device, not once per variable (about 12 graph ops a variable): the tiny train
    step's graph 4,668 -> 3,946 ops, its trace about a fifth faster (bench/trace_cost.py)."""
    self._update_scalars = {}
    try:
      return super()._backend_update_step(grads, trainable_variables, learning_rate)
    finally:
      self._update_scalars = None

  def update_step(self, gradient, variable, learning_rate):
    """Keras's Adam update, as one fused TensorFlow kernel per variable under TensorFlow.

    Keras writes the update as nine element-wise ops (two moments, the step), each
    a pass over the variable when the train step is not XLA-compiled (the CPU
    default): 2-3% of the base step's op time (bench/README.md). TensorFlow's
    ResourceApplyAdam computes the same formula in one pass: m += (1 - b1)(g - m),
    v += (1 - b2)(g^2 - v), w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps),
    t = iterations + 1 (tests/test_optimization.py checks it against Adam written in numpy).
    Other backends, and amsgrad, keep Keras's ops (JAX compiles the whole step).
    """
    if keras.config.backend() != "tensorflow" or self.amsgrad:
      return super().update_step(gradient, variable, learning_rate)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel  # TF backend only.
    dtype = variable.dtype
    index = self._get_variable_index(variable)
    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=self._momentums[index].value.handle,
        v=self._velocities[index].value.handle, grad=ops.cast(gradient, dtype),
        use_locking=False, **self._adam_scalars(dtype, variable.device, learning_rate))

  def _adam_scalars(self, dtype, device, learning_rate):
    """ResourceApplyAdam's scalar arguments in `dtype`, shared by the update's variables."""
    key = (dtype, device)
    cache = getattr(self, "_update_scalars", None)
    if cache is not None and key in cache:
      return cache[key]
    step = ops.cast(self.iterations + 1, dtype)
    beta1, beta2 = ops.cast(self.beta_1, dtype), ops.cast(self.beta_2, dtype)
    scalars = dict(beta1_power=ops.power(beta1, step), beta2_power=ops.power(beta2, step),
                   lr=ops.cast(learning_rate, dtype), beta1=beta1, beta2=beta2,
                   epsilon=ops.cast(self.epsilon, dtype))
    if cache is not None:
      cache[key] = scalars
    return scalars


def make_optimizer(hparams, train_steps=None):
  """Adam with the paper's beta_1, beta_2 and epsilon, driven by the schedule.

  `train_steps` (the run's last update) ends the linear decay, when hparams ask for one.

  With dtype=mixed_float16 it is wrapped in Keras's dynamic LossScaleOptimizer
  (float16 gradients underflow without it): the loss is multiplied by a scale
  that halves on a non-finite gradient (that update is skipped) and doubles
  after 2000 finite ones. bfloat16 has float32's exponent range and needs none.
  """
  adam = PreReducedAdam(
      learning_rate=learning_rate_schedule(hparams, train_steps), beta_1=hparams.adam_beta1,
      beta_2=hparams.adam_beta2, epsilon=hparams.adam_epsilon)
  if hparams.dtype == "mixed_float16":
    return keras.optimizers.LossScaleOptimizer(adam)
  return adam
