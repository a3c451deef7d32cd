"""The JAX step's stacked state: Adam on stacks of weights equals Keras's Adam.

jax_step.JaxTrainer hands jit the weights, Adam's moments and the dropout seed
states as a few stacks (arrays of one dtype and shape stacked) instead of ~590
arrays, and applies Adam's formula to the stacks itself (`adam_update`). The
independent truth is Keras's own Adam (`stateless_apply` on the per-array
variables): the same updates, bit for bit, at the first step and past the
warmup, with dropout on. A process has one Keras backend, so the check runs
under JAX in a subprocess.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason='jax is not installed (pip install -e ".[jax]")')

CHECK = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp, keras, numpy as np
    from t2tlite.models.transformer import Transformer
    from t2tlite.training import jax_step
    from t2tlite.training.optimization import make_optimizer
    from tests.helpers import tiny_hparams

    out = {}
    hp = tiny_hparams(dropout=0.1, learning_rate_warmup_steps=4)
    from t2tlite import optional_imports
    with optional_imports.skipped(("tensorflow",)):  # Keras would import it only to seed it.
      keras.utils.set_random_seed(0)
    model = Transformer(hp)
    optimizer = make_optimizer(hp)
    optimizer.build(model.trainable_variables)
    trainer = jax_step.JaxTrainer(model, optimizer, hp)
    out["seed_arrays"] = len(model.non_trainable_variables)
    kinds = lambda vs: len({(str(v.dtype), tuple(v.shape)) for v in vs})  # noqa: E731
    out["kinds"] = [kinds(model.trainable_variables), kinds(model.non_trainable_variables)]
    out["weight_arrays"] = len(model.trainable_variables)
    out["stacks"] = [len(trainer.state[0]), len(trainer.state[1]), len(trainer.state[2][1]),
                     len(trainer.state[2][2])]

    # 1. adam_update against Keras's stateless_apply from the same per-array state, first
    #    step and past the warmup (iterations 9: step 10 of a 4-step warmup).
    rng = np.random.default_rng(0)
    weights = [jnp.asarray(v.value) for v in model.trainable_variables]
    grads = [jnp.asarray(rng.normal(size=w.shape), w.dtype) for w in weights]
    moments = [jnp.asarray(rng.normal(size=w.shape), w.dtype) for w in weights]
    velocities = [jnp.asarray(rng.uniform(size=w.shape), w.dtype) for w in weights]
    index = {id(v): i for i, v in enumerate(optimizer.variables)}
    exact = []
    for it in (0, 9):
      keras_state = [jnp.asarray(v.value) for v in optimizer.variables]
      keras_state[index[id(optimizer.iterations)]] = jnp.asarray(it, optimizer.iterations.dtype)
      for m, v, mv, vv in zip(optimizer._momentums, optimizer._velocities, moments, velocities):
        keras_state[index[id(m)]], keras_state[index[id(v)]] = mv, vv
      new_weights, new_state = optimizer.stateless_apply(keras_state, grads, weights)
      layout = trainer._weights
      ours_w, ours_m, ours_v = jax_step.adam_update(
          optimizer, layout.pack(weights), layout.pack(grads),
          jnp.asarray(it, optimizer.iterations.dtype), layout.pack(moments),
          layout.pack(velocities))
      ours_w = layout.unpack(ours_w)
      keras_m = [new_state[index[id(m)]] for m in optimizer._momentums]
      keras_v = [new_state[index[id(v)]] for v in optimizer._velocities]
      moved = any(not np.array_equal(a, b) for a, b in zip(new_weights, weights))
      exact.append(dict(
          moved=bool(moved),
          weights=all(np.array_equal(a, b) for a, b in zip(ours_w, new_weights)),
          moments=all(np.array_equal(a, b) for a, b in zip(layout.unpack(ours_m), keras_m)),
          velocities=all(np.array_equal(a, b) for a, b in zip(layout.unpack(ours_v), keras_v))))
    out["adam"] = exact

    # 2. The state round-trips through the Keras variables (checkpoints read them).
    batch = {k: jnp.asarray(rng.integers(2, 20, (4, 6)), jnp.int32) for k in ("inputs", "targets")}
    for _ in range(3):
      trainer.train_step(batch)
    trainer.write_to_model()
    flat = jax.tree_util.tree_leaves(trainer.state)
    trainer.read_from_model()
    out["round_trip"] = all(np.array_equal(a, b)
                            for a, b in zip(flat, jax.tree_util.tree_leaves(trainer.state)))
    out["iterations"] = [trainer.iterations, int(optimizer.iterations.value)]
    out["seeds_moved"] = not all(
        np.array_equal(a, b) for a, b in zip(
            trainer._seeds.unpack(trainer.state[1]),
            [jnp.asarray(v.value) for v in Transformer(hp).non_trainable_variables]))

    # 3. Stacks keeps dtypes and shapes apart and gives back what it packed, in order.
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.uint32),
              np.ones((2, 3), np.float32) * 7, np.arange(4, dtype=np.float32),
              np.arange(6, dtype=np.uint32).reshape(2, 3), np.arange(4, 8, dtype=np.uint32)]
    layout = jax_step.Stacks(arrays)
    packed = layout.pack([jnp.asarray(a) for a in arrays])
    out["stacked"] = dict(stacks=[[str(b.dtype), list(b.shape)] for b in packed],
                          back=all(np.array_equal(a, b) and a.dtype == b.dtype
                                   for a, b in zip(arrays, layout.unpack(packed))),
                          first=np.array_equal(packed[0][1], arrays[2]))
    print(json.dumps(out))
    """)


@pytest.fixture(scope="module")
def result():
  env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="",
             TF_CPP_MIN_LOG_LEVEL="3",
             PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
  proc = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=REPO, capture_output=True,
                        text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_jax
def test_adam_on_stacks_is_keras_adam_bit_for_bit(result):
  for step in result["adam"]:
    assert step == dict(moved=True, weights=True, moments=True, velocities=True)


@needs_jax
def test_state_crosses_jit_as_one_stack_per_dtype_and_shape_and_round_trips(result):
  assert result["seed_arrays"] > 1
  weights, seeds = result["kinds"]
  assert weights < result["weight_arrays"] and seeds == 1
  # Weights, seeds, moments, velocities: one stack per distinct (dtype, shape).
  assert result["stacks"] == [weights, seeds, weights, weights]
  assert result["round_trip"]
  assert result["iterations"] == [3, 3]
  assert result["seeds_moved"]  # Dropout drew from the seed states, which came back advanced.


@needs_jax
def test_stacks_group_by_dtype_and_shape_and_unpack_exactly(result):
  assert result["stacked"] == dict(
      stacks=[["float32", [2, 2, 3]], ["uint32", [2, 4]], ["float32", [1, 4]],
              ["uint32", [1, 2, 3]]],
      back=True, first=True)
