"""One optimizer update and one evaluation step, compiled.

The step runs under a `tf.distribute` strategy: `strategy.run` executes the
per-replica step and the metric sums are reduced across replicas.

* Normalisation. The loss of an update is the sum of the smoothed
  cross-entropy over every real target token of the *global* batch (all
  replicas, all micro-batches) divided by that global token count, which is
  all-reduced before the backward pass. Each replica's gradient is then its
  share of the one-device gradient, and their sum (the all-reduce) is exactly
  the one-device gradient of the global batch, whatever the replicas' token
  counts. Normalising per replica would weight a replica's tokens by
  1 / its own count instead.
* Gradient accumulation (`hparams.accumulate_steps` = N). A replica's batch
  holds N micro-batches of one bucket shape, [N * b, L]; a loop inside the
  compiled step sums their gradients, and one optimizer update follows. So
  the update is the N-times-larger batch's update, the Noam step counts
  updates, and a checkpoint never falls between micro-batches.
* Gradient norm and clipping use the all-reduced (global) gradient.
* mixed_float16: the loss is multiplied by the LossScaleOptimizer's dynamic
  scale; norms are reported unscaled, and a non-finite gradient skips the
  update (the optimizer's `iterations` does not advance).
* XLA (`hparams.xla`; "auto" is on with a GPU/TPU only, see t2tlite/xla_choice.py). With
  one device the whole update (gradients and optimizer) is one XLA cluster. With MirroredStrategy or
  MultiWorkerMirroredStrategy the forward/backward pass of each replica is
  compiled, and the all-reduce and the optimizer run around it. Either way
  `step` is traced once per batch shape, so XLA compiles once per bucket
  shape; `compilations(step)` reports how many traces there were. Without XLA
  the trainer traces a step of changing shapes once, for any shape
  (`trace_for_any_shape`). A step not
  compiled whole (train or eval) still compiles its loss over the vocabulary
  alone (`hparams.xla_loss`, on by default; `xla_token_loss_sums` says why), once
  per batch shape.

Every tf.function here runs without AutoGraph: nothing in a step branches or
loops on a tensor (the code is keras.ops, which the JAX backend runs too), so
AutoGraph would only rewrite the source of each function the trace reaches.
Measured on the tests' tiny step while an optimizer not yet built still made
TensorFlow trace it twice: 9.4-12.0 s with AutoGraph, 5.8-7.4 s without; in a
trainer (one trace) about a second of its 7-9 s.
"""

import keras
import tensorflow as tf

from t2tlite import xla_choice
from t2tlite.constants import PAD_ID
from t2tlite.training import distribution, losses

METRIC_KEYS = ("loss", "nll", "tokens", "correct", "sequences", "correct_sequences")
SUM = tf.distribute.ReduceOp.SUM


def _sums_dict(sums: losses.TokenLossSums):
  return {key: getattr(sums, key) for key in METRIC_KEYS}


_xla_loss_forward = tf.function(losses.token_loss_sums_and_logsumexp, autograph=False,
                                jit_compile=True)
_xla_loss_backward = tf.function(losses.loss_logits_gradient, autograph=False, jit_compile=True)


def xla_token_loss_sums(logits, labels, label_smoothing, segments=None) -> losses.TokenLossSums:
  """losses.token_loss_sums with its forward and its backward pass each one XLA cluster.

  Uncompiled, each op of the smoothed cross-entropy and its written-out gradient
  (cast, max, exp, sums, softmax - q) is a pass over [batch, length, vocab] in
  float32; XLA fuses them into a few passes over the logits as they come (bfloat16
  under mixed_bfloat16), compiled once per batch shape. bench/README.md has the
  measurements. Inside a step compiled whole it is not used (the step's own
  compilation fuses the same).

  The gradient is given here, not derived by TensorFlow from the compiled
  function: the backward cluster reads the logits and the forward's logsumexp
  ([batch, length]) only. Derived, the forward cluster wrote float32 copies of
  [batch, length, vocab] tensors for the backward pass to read (the cast logits;
  in the trainer's shape-relaxed step also tensors whose shapes the gradient
  functions ask at run time): the recipe's step spent 63 ms in these clusters
  relaxed, 37 ms now (bench/README.md, "The trainer's step traced shape-relaxed").
  """

  @tf.custom_gradient
  def sums_of(logits):
    sums, logsumexp = _xla_loss_forward(logits, labels, label_smoothing, segments)

    def grad(d_loss, *unused):  # Only the loss sum depends on the logits.
      return _xla_loss_backward(logits, labels, label_smoothing, logsumexp, d_loss)

    return tuple(sums), grad

  return losses.TokenLossSums(*sums_of(logits))


def loss_sums_function(hparams):
  """losses.token_loss_sums, or its XLA-compiled form where the step around it is uncompiled."""
  if hparams.xla_loss and not xla_choice.train_xla(hparams):
    return xla_token_loss_sums
  return losses.token_loss_sums


def real_tokens(targets):
  """Non-pad target tokens of a batch, float32 (the loss normaliser)."""
  return tf.reduce_sum(tf.cast(tf.not_equal(targets, PAD_ID), tf.float32))


def make_train_step(model, optimizer, hparams, strategy=None):
  """Returns `step(batch) -> metric sums` (a tf.function) that applies one update.

  `batch` is the global batch {"inputs": [R * N * b, S], "targets": [R * N * b, T]}
  for R replicas and N = accumulate_steps micro-batches of b rows; replica r
  trains on rows [r * N * b, (r + 1) * N * b).
  """
  strategy = strategy or tf.distribute.get_strategy()
  variables = model.trainable_variables
  if not optimizer.built:  # Its slots made in the first trace would make TF trace the step twice.
    with strategy.scope():
      optimizer.build(variables)
  num_micro = hparams.accumulate_steps
  loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
  sync = distribution.needs_cross_replica_sync(strategy)
  loss_sums = loss_sums_function(hparams)

  def micro_batch_gradients(batch, global_tokens):
    """Gradients of (loss sum / global_tokens) for one micro-batch, and its metric sums."""
    with tf.GradientTape() as tape:
      logits = model(batch, training=True)
      sums = loss_sums(logits, batch["targets"], hparams.label_smoothing,
                       batch.get("targets_segmentation"))
      loss = sums.loss / global_tokens
      if loss_scaled:
        loss = optimizer.scale_loss(loss)
    grads = tape.gradient(loss, variables)
    return [tf.convert_to_tensor(g) for g in grads], _sums_dict(sums)

  def gradients(batch, global_tokens):
    """Summed over the replica's micro-batches: no cross-replica communication in here."""
    if num_micro == 1:
      return micro_batch_gradients(batch, global_tokens)
    micro = {k: tf.reshape(v, [num_micro, -1, tf.shape(v)[1]]) for k, v in batch.items()}  # [N, b, L]

    def body(i, grads, sums):
      g, s = micro_batch_gradients({k: v[i] for k, v in micro.items()}, global_tokens)
      return (i + 1, [a + b for a, b in zip(grads, g)],
              {k: sums[k] + s[k] for k in METRIC_KEYS})

    zeros = ([tf.zeros_like(v) for v in variables], {k: tf.constant(0.0) for k in METRIC_KEYS})
    _, grads, sums = tf.while_loop(lambda i, *_: i < num_micro, body, (0,) + zeros)
    return grads, sums

  def apply(grads):
    """Clips by the global norm, updates the weights; returns the (unscaled) norm."""
    scale = tf.convert_to_tensor(optimizer.dynamic_scale) if loss_scaled else 1.0
    grad_norm = tf.linalg.global_norm(grads)
    if hparams.clip_grad_norm > 0:
      grads, _ = tf.clip_by_global_norm(grads, hparams.clip_grad_norm * scale,
                                        use_norm=grad_norm)
    optimizer.apply_gradients(zip(grads, variables))
    return grad_norm / scale

  def whole_step(batch):
    """One device: tokens, gradients and update in one (XLA) function."""
    grads, sums = gradients(batch, tf.maximum(real_tokens(batch["targets"]), 1.0))
    sums["grad_norm"] = apply(grads)
    return sums

  compiled_gradients = tf.function(gradients, autograph=False,
                                   jit_compile=xla_choice.train_xla(hparams))

  def synced_step(batch):
    """Several replicas: all-reduce the token count, then the gradients."""
    context = tf.distribute.get_replica_context()
    global_tokens = context.all_reduce(SUM, real_tokens(batch["targets"]))
    grads, sums = compiled_gradients(batch, tf.maximum(global_tokens, 1.0))
    sums["grad_norm"] = apply(context.all_reduce(SUM, grads))
    return sums

  if sync:
    replica_step = synced_step
  else:
    compiled_whole = tf.function(whole_step, autograph=False,
                                 jit_compile=xla_choice.train_xla(hparams))
    replica_step = lambda batch: compiled_whole(batch)  # noqa: E731 (see make_eval_step)

  def step(batch):
    batch = distribution.split_batch(strategy, batch)
    return _reduce(strategy, strategy.run(replica_step, args=(batch,)))

  return _trace_per_shape_if_xla(step, hparams)


def make_eval_step(model, hparams, strategy=None):
  """Returns `step(batch) -> metric sums` of a teacher-forced forward pass."""
  strategy = strategy or tf.distribute.get_strategy()
  loss_sums = loss_sums_function(hparams)  # The train step's loss: dev reads the same sums.

  def replica_step(batch):
    logits = model(batch, training=False)
    return _sums_dict(loss_sums(logits, batch["targets"], hparams.label_smoothing,
                                batch.get("targets_segmentation")))

  compiled = tf.function(replica_step, autograph=False,
                         jit_compile=xla_choice.train_xla(hparams))

  def step(batch):
    # A plain function around the compiled one: strategy.run would otherwise
    # compile one XLA program spanning every device, which CPUs cannot run.
    batch = distribution.split_batch(strategy, batch)
    return _reduce(strategy, strategy.run(lambda b: compiled(b), args=(batch,)))

  return _trace_per_shape_if_xla(step, hparams)


def _trace_per_shape_if_xla(step, hparams):
  """tf.function(step): one trace per batch shape with XLA, else shape-relaxed.

  XLA needs static shapes, so it compiles once per bucket shape (bounded by the
  bucket count). Without XLA a trace per shape buys nothing but graph building:
  a 4+4-layer step took ~10 s to trace on one CPU core, ~7 minutes over 42 bucket
  shapes. reduce_retracing relaxes [rows, length] to [None, None] at the second
  shape, so a run would trace twice; the trainer traces the relaxed step first
  (`trace_for_any_shape`), so once. The relaxed graph runs within a few
  milliseconds of a static one since the loss gives its own gradient
  (`xla_token_loss_sums`); bench/step_profile.py --relaxed profiles it.
  """
  return tf.function(step, autograph=False, reduce_retracing=not xla_choice.train_xla(hparams))


def trace_for_any_shape(step, batch) -> None:
  """Traces `step` (not XLA-compiled) once for batches of `batch`'s structure and any shape.

  Called before the first step of a stream whose shapes change (buckets, dev): that one
  trace serves the whole run. reduce_retracing alone relaxes only at the second shape, after
  a first trace for the first shape that the run then no longer uses (about 6 s for the
  tests' tiny model, 10 s for 4+4 layers). A stream of one shape (packed rows, the benches)
  keeps its static trace, which the remapper fuses further; an XLA step compiles per shape.
  """
  step.get_concrete_function(tf.nest.map_structure(
      lambda t: tf.TensorSpec([None] * len(t.shape), t.dtype), batch))


def compilations(step) -> int:
  """How many batch shapes `step` has been traced (and, with XLA, compiled) for."""
  return step.experimental_get_tracing_count()


def _reduce(strategy, per_replica):
  """Sums over replicas; the gradient norm (identical on every replica) is averaged."""
  out = {}
  for key, value in per_replica.items():
    op = tf.distribute.ReduceOp.MEAN if key == "grad_norm" else SUM
    out[key] = strategy.reduce(op, value, axis=None)
  return out
