"""Token-budget batching: budgets, static shapes per bucket, nothing lost or duplicated."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from t2tlite import registry
from t2tlite.training import input_pipeline as ip


def t2t_bucket_boundaries(max_length, min_length=8, step=1.1):
  """tensor2tensor's data_reader._bucket_boundaries, restated."""
  x, out = min_length, []
  while x < max_length:
    out.append(x)
    x = max(x + 1, int(x * step))
  return out


@pytest.mark.parametrize("max_length,step", [(256, 1.1), (64, 1.5), (8, 1.1), (100, 2.0)])
def test_boundaries_follow_t2t_and_end_at_max_length(max_length, step):
  got = ip.bucket_boundaries(max_length, 8, step)
  assert got[:-1] == t2t_bucket_boundaries(max_length, 8, step)
  assert got[-1] == max_length


def _examples(lengths, seed=0):
  rng = np.random.RandomState(seed)
  pairs = []
  for i, (s, t) in enumerate(lengths):
    src = np.concatenate([rng.randint(2, 50, s - 1), [1]]).astype(np.int32)
    tgt = np.concatenate([[i + 2], rng.randint(2, 50, t - 2), [1]]).astype(np.int32)  # id tag
    pairs.append({"inputs": src, "targets": tgt})
  return pairs


def _dataset(pairs):
  return tf.data.Dataset.from_generator(
      lambda: iter(pairs), output_signature={
          "inputs": tf.TensorSpec([None], tf.int32), "targets": tf.TensorSpec([None], tf.int32)})


def test_evaluation_batches_cover_every_example_once_with_static_shapes():
  rng = np.random.RandomState(1)
  lengths = [(int(rng.randint(2, 40)), int(rng.randint(3, 40))) for _ in range(500)]
  pairs = _examples(lengths)
  hp = registry.hparams("transformer_tiny").replace(batch_size=256, max_length=64)
  boundaries = ip.bucket_boundaries(64, hp.min_length_bucket, hp.length_bucket_step)
  sizes = ip.bucket_batch_sizes(boundaries, 256)
  seen = collections.Counter()
  for batch in ip.evaluation_dataset(_dataset(pairs), hp):
    rows, width = batch["inputs"].shape
    bucket = boundaries.index(width)
    assert rows == sizes[bucket] and batch["targets"].shape == (rows, width)
    assert rows * width <= 256 or rows == 1  # The token budget holds.
    for row in batch["targets"].numpy():
      if row[0]:  # All-pad rows only fill the last batch of a bucket.
        length = int((row != 0).sum())
        example = int(row[0]) - 2
        assert ip.bucket_of(max(lengths[example]), boundaries) == bucket
        assert length == lengths[example][1]
        seen[example] += 1
  assert seen == collections.Counter(range(500))
  # Untuned, as the training stream (below): the end of each dev pass deleted its iterator.
  assert ip.evaluation_dataset(_dataset(pairs), hp).options().autotune.enabled is False


@pytest.mark.parametrize("replicas", [1, 2])
def test_evaluation_batches_without_static_shapes_drop_only_the_filler_rows(replicas):
  """The same batches, in the same order, less the all-pad rows (to a multiple of replicas)."""
  rng = np.random.RandomState(3)
  lengths = [(int(rng.randint(2, 40)), int(rng.randint(3, 40))) for _ in range(300)]
  pairs = _examples(lengths)
  hp = registry.hparams("transformer_tiny").replace(batch_size=256, max_length=64)
  static = list(ip.evaluation_dataset(_dataset(pairs), hp, replicas=replicas))
  relaxed = list(ip.evaluation_dataset(_dataset(pairs), hp, replicas=replicas,
                                       static_shapes=False))
  assert len(relaxed) == len(static)
  fillers = rounded = 0
  for full, trimmed in zip(static, relaxed):
    real = int((full["targets"].numpy()[:, 0] != 0).sum())  # Real rows come first.
    rows = -(-real // replicas) * replicas
    for key in ("inputs", "targets"):
      np.testing.assert_array_equal(trimmed[key].numpy(), full[key].numpy()[:rows])
    fillers += full["targets"].shape[0] - rows
    rounded += rows - real
  assert fillers > 0  # Partial batches were there to trim.
  assert (rounded > 0) == (replicas > 1)  # An odd partial batch kept one filler row to split.


def test_training_stream_filters_long_examples_and_repeats():
  pairs = _examples([(5, 6), (30, 4), (7, 70), (12, 12)])
  hp = registry.hparams("transformer_tiny").replace(batch_size=64, max_length=32,
                                                     shuffle_buffer_size=10)
  tags = set()
  for batch in ip.training_dataset(_dataset(pairs), hp, seed=1).take(30):
    tags.update(int(r[0]) - 2 for r in batch["targets"].numpy() if r[0])
    assert batch["inputs"].shape[1] <= 32
  assert tags == {0, 1, 3}  # Example 2 (target length 70) is over max_length.


@pytest.mark.parametrize("packed", [False, True])
def test_training_stream_runs_untuned_and_yields_the_tuned_streams_batches(packed):
  """No autotuning thread (its iterator's deletion waited up to a minute at a trainer's exit).

  The batches are those of the same pipeline tuned: tuning changes parallelism, not order.
  """
  rng = np.random.RandomState(4)
  pairs = _examples([(int(rng.randint(2, 30)), int(rng.randint(3, 30))) for _ in range(200)])
  hp = registry.hparams("transformer_tiny").replace(batch_size=128, max_length=32,
                                                     shuffle_buffer_size=50,
                                                     packed_batches=packed)
  untuned = ip.training_dataset(_dataset(pairs), hp, seed=3)
  assert untuned.options().autotune.enabled is False
  tuning = tf.data.Options()
  tuning.autotune.enabled = True
  # Built anew: one pipeline's shuffle reshuffles for each iterator made from it.
  tuned = ip.training_dataset(_dataset(pairs), hp, seed=3).with_options(tuning)
  assert tuned.options().autotune.enabled is True
  for a, b in zip(untuned.take(40), tuned.take(40)):
    for key in a:
      np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())


def test_padding_efficiency_is_high_with_fine_buckets():
  """With t2t's 1.1 step, padding wastes little: real / all tokens over the eval pass."""
  rng = np.random.RandomState(2)
  sources = rng.randint(5, 60, size=2000)
  lengths = [(int(s), int(max(3, s + rng.randint(-2, 3)))) for s in sources]  # Parallel-like.
  hp = registry.hparams("transformer_base").replace(batch_size=4096, max_length=64)
  real = total = 0
  for batch in ip.evaluation_dataset(_dataset(_examples(lengths)), hp):
    if batch["targets"].numpy()[:, 0].all():  # Skip tail batches (all-pad rows) for a fair ratio.
      for side in ("inputs", "targets"):
        real += int((batch[side].numpy() != 0).sum())
        total += batch[side].numpy().size
  assert real / total > 0.85
