"""One optimizer update and one evaluation step, compiled.

The step runs under a `tf.distribute` strategy from day one: `strategy.run`
executes the per-replica step (XLA-compiled when `hparams.xla`), and the
metric sums are reduced across replicas. With the default strategy there is
one replica and the whole update, optimizer included, is one XLA cluster.
The loss is normalised by the real target tokens of the step.
"""

import tensorflow as tf

from t2tlite.training import losses

METRIC_KEYS = ("loss", "nll", "tokens", "correct", "sequences", "correct_sequences")


def _sums_dict(sums: losses.TokenLossSums):
  return {key: getattr(sums, key) for key in METRIC_KEYS}


def make_train_step(model, optimizer, hparams, strategy=None):
  """Returns `step(batch) -> metric sums` (a tf.function) that applies one update."""
  strategy = strategy or tf.distribute.get_strategy()
  variables = model.trainable_variables

  def replica_step(batch):
    with tf.GradientTape() as tape:
      logits = model(batch, training=True)
      sums = losses.token_loss_sums(logits, batch["targets"], hparams.label_smoothing)
      loss = sums.loss / tf.maximum(sums.tokens, 1.0)
    grads = tape.gradient(loss, variables)
    grad_norm = tf.linalg.global_norm(grads)
    if hparams.clip_grad_norm > 0:
      grads, _ = tf.clip_by_global_norm(grads, hparams.clip_grad_norm, use_norm=grad_norm)
    optimizer.apply_gradients(zip(grads, variables))
    out = _sums_dict(sums)
    out["grad_norm"] = grad_norm
    return out

  compiled = tf.function(replica_step, jit_compile=hparams.xla)

  # Traced once for any batch shape; XLA still compiles once per concrete bucket shape.
  @tf.function(reduce_retracing=True)
  def step(batch):
    per_replica = strategy.run(compiled, args=(batch,))
    return _reduce(strategy, per_replica)

  return step


def make_eval_step(model, hparams, strategy=None):
  """Returns `step(batch) -> metric sums` of a teacher-forced forward pass."""
  strategy = strategy or tf.distribute.get_strategy()

  def replica_step(batch):
    logits = model(batch, training=False)
    return _sums_dict(losses.token_loss_sums(logits, batch["targets"], hparams.label_smoothing))

  compiled = tf.function(replica_step, jit_compile=hparams.xla)

  @tf.function(reduce_retracing=True)
  def step(batch):
    return _reduce(strategy, strategy.run(compiled, args=(batch,)))

  return step


def _reduce(strategy, per_replica):
  """Sums over replicas; the gradient norm (identical on every replica) is averaged."""
  out = {}
  for key, value in per_replica.items():
    op = tf.distribute.ReduceOp.MEAN if key == "grad_norm" else tf.distribute.ReduceOp.SUM
    out[key] = strategy.reduce(op, value, axis=None)
  return out
