"""A variant of the JAX step for bench/jax_step_variants.py (`step_module=` this file): the
step's metric sums as one float32 vector inside the donated state.

Why
---
With the state as stacks (jax_step.Stacks), every output of the step but the eight metric
scalars reuses a donated input buffer; those eight get fresh device buffers at every call.
Here they travel as one vector in the state, so every output aliases an input. Measured on an
H200 (bench/README.md, "the state as stacks"): 1.007-1.016x with a host sync per step, 1.000x
pipelined. Not adopted: t2t-trainer runs pipelined, where it buys nothing, and the trainer's
metric window would have to read the sums out of the state. Training only (no eval step).
"""

import jax.numpy as jnp
import numpy as np

from t2tlite.training import jax_step

KEYS = jax_step.METRIC_KEYS + ("grad_norm",)


class HostSums:
  """The step's sums, read from the device in one copy at the first key asked for."""

  def __init__(self, vector):
    self._vector, self._host = vector, None

  def __getitem__(self, key):
    if self._host is None:
      self._host = np.asarray(self._vector)
    return self._host[KEYS.index(key)]


class JaxTrainer(jax_step.JaxTrainer):
  """jax_step.JaxTrainer with the sums as a fourth part of the state."""

  def read_from_model(self):
    super().read_from_model()
    self.state = tuple(self.state) + (jnp.zeros(len(KEYS), jnp.float32),)

  def _train_step(self, state, batch):
    new_state, sums = super()._train_step(tuple(state[:3]), batch)
    vector = jnp.stack([jnp.asarray(sums[k], jnp.float32) for k in KEYS])
    return tuple(new_state) + (vector,), None

  def train_step(self, batch):
    self.state, _ = self._train(self.state, self.shard_batch(batch))
    self._iterations += 1
    return HostSums(self.state[3])
