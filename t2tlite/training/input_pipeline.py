"""Token-budget batching with length buckets, as tensor2tensor batches.

`batch_size` counts tokens, not sentences: a bucket whose examples are padded
to length L holds batch_size // L examples, so every batch carries about the
same number of tokens (Section 5.1: "batched together by approximate sequence
length"). Bucket boundaries grow geometrically (min_length_bucket, then x
length_bucket_step), which keeps padding low, and every batch of a bucket has
the same static shape [batch_size // L, L], so an XLA-compiled train step
compiles once per bucket and never again.

Under tf.distribute a batch is global: `batch_size` stays tokens per device
(as in tensor2tensor), so a training batch holds replicas x accumulate_steps
times the per-device rows, all of one bucket, which the strategy splits into
equal per-replica parts (and the train step into micro-batches).

Examples are dicts {"inputs": int32 [s], "targets": int32 [t]} with EOS
already appended by the problem.

With `hparams.packed_batches` the training stream is packed instead
(t2tlite/data/packing.py): windows of the shuffled stream are packed
first-fit decreasing into rows of `hparams.packed_row_length` tokens per side, and a
batch is batch_size // that length rows, one static shape for the whole run.
Evaluation stays bucketed, each row one pair (`single_segments`), so its
numbers are the unpacked ones.
"""

import bisect
from typing import List

import tensorflow as tf

from t2tlite.constants import PAD_ID
from t2tlite.data import packing

# tf.data converts each function it traces with AutoGraph unless told not to. None here
# branches or loops on a tensor, and converting them cost a tiny trainer run about 1 s.
_no_autograph = tf.autograph.experimental.do_not_convert

# Pairs packed together: rows are filled first-fit decreasing within a window of this many
# pairs of the shuffled stream (larger windows packed Multi30k no better: bench/README.md).
PACK_WINDOW = 4096


def bucket_boundaries(max_length: int, min_length: int = 8, step: float = 1.1) -> List[int]:
  """Geometric boundaries min_length, ..., max_length (t2t's _bucket_boundaries)."""
  boundaries = []
  x = min_length
  while x < max_length:
    boundaries.append(x)
    x = max(x + 1, int(x * step))
  boundaries.append(max(max_length, min_length))
  return boundaries


def bucket_batch_sizes(boundaries: List[int], batch_size: int) -> List[int]:
  """Examples per batch for each bucket: the token budget over the padded length."""
  return [max(1, batch_size // length) for length in boundaries]


@_no_autograph
def example_length(example):
  """Length that decides the bucket: the longer of source and target."""
  return tf.maximum(tf.shape(example["inputs"])[0], tf.shape(example["targets"])[0])


def filter_max_length(dataset, max_length: int):
  """Drops examples with either side longer than max_length (0 keeps all)."""
  if not max_length:
    return dataset
  return dataset.filter(_no_autograph(lambda ex: example_length(ex) <= max_length))


def batch_by_length(dataset, hparams, max_length: int, pad_batch: bool = False,
                    rows_multiple: int = 1):
  """Groups examples into token-budget batches of static shape per bucket.

  Args:
    dataset: examples {"inputs": [s], "targets": [t]}, all of length <= max_length.
    hparams: reads batch_size, min_length_bucket, length_bucket_step.
    max_length: the largest example length (the last boundary).
    pad_batch: pad a bucket's last, partial batch with all-pad rows to the full
      batch size (for finite evaluation sets, so their shapes stay static too;
      all-pad rows carry zero loss weight). Otherwise such a batch keeps its
      rows, padded only up to a multiple of rows_multiple (it still splits).
    rows_multiple: batches hold this many times the rows of one token budget
      (replicas x micro-batches of a global batch).
  Returns:
    Dataset of {"inputs": [n, L], "targets": [n, L]} with n, L fixed per bucket.
  """
  boundaries = bucket_boundaries(max_length, hparams.min_length_bucket,
                                 hparams.length_bucket_step)
  sizes = [n * rows_multiple for n in bucket_batch_sizes(boundaries, hparams.batch_size)]
  boundaries_t = tf.constant(boundaries, tf.int32)
  sizes_t = tf.constant(sizes, tf.int64)

  @_no_autograph
  def key_fn(example):
    bucket = tf.searchsorted(boundaries_t, [example_length(example)], side="left")[0]
    return tf.cast(tf.minimum(bucket, len(boundaries) - 1), tf.int64)

  @_no_autograph
  def reduce_fn(bucket, window):
    length = boundaries_t[bucket]
    batched = window.padded_batch(sizes_t[bucket], padded_shapes={
        "inputs": [length], "targets": [length]})
    if pad_batch:
      batched = batched.map(_no_autograph(
          lambda b: {k: _pad_rows(v, sizes_t[bucket]) for k, v in b.items()}))
    elif rows_multiple > 1:
      batched = batched.map(_no_autograph(
          lambda b: {k: _pad_rows(v, _round_up(tf.shape(v)[0], rows_multiple))
                     for k, v in b.items()}))
    return batched

  return dataset.group_by_window(key_func=key_fn, reduce_func=reduce_fn,
                                 window_size_func=_no_autograph(lambda bucket: sizes_t[bucket]))


def _pad_rows(batch, rows):
  return tf.pad(batch, [[0, tf.cast(rows, tf.int32) - tf.shape(batch)[0]], [0, 0]])


def _round_up(rows, multiple: int):
  return (rows + multiple - 1) // multiple * multiple


def bucket_of(length: int, boundaries: List[int]) -> int:
  """Python twin of key_fn, for tests and reports."""
  return min(bisect.bisect_left(boundaries, length), len(boundaries) - 1)


def pack_dataset(dataset, length: int, window: int = PACK_WINDOW, seed=None):
  """Examples (each side <= `length`) -> packed rows {packing.FEATURES: int32 [length]}.

  Each window of `window` consecutive examples is packed first-fit decreasing
  (packing.pack_padded); the rows are then shuffled (`seed`), so a batch does
  not gather the rows a window opened first (its longest pairs) or last (its
  shortest). The row buffer, window // 8 rows, is about one window's rows at
  Multi30k's 8 pairs a row, and small in the checkpointed iterator state.
  """
  @_no_autograph
  def pack(batch):
    arrays = tf.numpy_function(lambda s, t: packing.pack_padded(s, t, length),
                               [batch["inputs"], batch["targets"]],
                               [tf.int32] * len(packing.FEATURES), stateful=False)
    for array in arrays:
      array.set_shape([None, length])
    return dict(zip(packing.FEATURES, arrays))

  padded = dataset.padded_batch(window, padded_shapes={"inputs": [length], "targets": [length]})
  return padded.map(pack).unbatch().shuffle(max(1, window // 8), seed=seed)


@_no_autograph
def single_segments(batch):
  """An unpacked batch with the features of a packed one, each row holding one pair.

  {"inputs": [n, L], "targets": [n, L]} -> also segment ids (1 on real tokens, 0 on
  padding) and positions (0, 1, ... ; 0 on padding), what a packed model reads.
  """
  out = dict(batch)
  for side in ("inputs", "targets"):
    real = tf.cast(tf.not_equal(batch[side], PAD_ID), tf.int32)
    out[f"{side}_segmentation"] = real
    out[f"{side}_position"] = real * tf.range(tf.shape(batch[side])[1])[None]
  return out


def training_dataset(dataset, hparams, seed=None, replicas: int = 1, autotune: bool = False):
  """Infinite, shuffled, filtered stream of global batches for `replicas` devices.

  Each batch holds replicas x accumulate_steps x (batch_size // L) rows of one
  bucket of length L; packed (hparams.packed_batches), of L = packed_row_length.
  autotune: tf.data's autotuning, as every run started before 2026-12-01 had; their
  checkpoints hold that stream's iterator, which only the tuned stream restores
  (run_identity.input_tuned).
  """
  rows_multiple = replicas * hparams.accumulate_steps
  if hparams.packed_batches:
    length = hparams.packed_row_length
    dataset = filter_max_length(dataset, hparams.longest_training_side)
    dataset = dataset.repeat().shuffle(hparams.shuffle_buffer_size, seed=seed)
    rows = max(1, hparams.batch_size // length) * rows_multiple
    batches = pack_dataset(dataset, length, seed=seed).batch(rows, drop_remainder=True)
  else:
    max_length = hparams.max_length or _longest(dataset)
    dataset = filter_max_length(dataset, max_length)
    dataset = dataset.repeat().shuffle(hparams.shuffle_buffer_size, seed=seed)
    batches = batch_by_length(dataset, hparams, max_length, rows_multiple=rows_multiple)
  batches = batches.prefetch(2)
  return batches if autotune else without_autotuning(batches)


def without_autotuning(dataset):
  """`dataset` without tf.data's autotuning thread: the training stream and the dev pass.

  An iterator with autotuning waits, when deleted, for its tuning thread, which sleeps
  between rounds for a period that doubles up to a minute. On one core or one thread
  (`taskset`, TF_NUM_INTEROP_THREADS=1: the pinned runs of the recipes, several workers
  on one machine) that wait was served in full: a trainer sat 20-57 s at exit after its
  last line, the other workers of its cluster, already gone, were reported as crashed
  meanwhile, and the end of a dev pass waited up to 1.3 s (bench/README.md, "A trainer's
  exit"). Nothing here needs tuning: untuned, the parallel reads and parses take one
  thread per core (up to 16), and the prefetch is a fixed two batches; the batches are
  the same.
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def evaluation_dataset(dataset, hparams, replicas: int = 1, static_shapes: bool = True):
  """One pass over every example (none filtered), token-batched.

  static_shapes: each bucket's last, partial batch is filled with all-pad rows
  to the bucket's full batch, so a step compiled per shape (XLA, JAX) sees one
  shape per bucket. A step traced shape-relaxed (TensorFlow without XLA) should
  pass False: a small dev set is mostly partial batches (Multi30k's 1014
  sentences fill 24 buckets' batches to about a sixth), and the filler rows
  would be most of the evaluation's work.

  Never packed; for a packed model each row is given the features of one pair.
  """
  max_length = max(hparams.max_length, _longest(dataset))
  batches = batch_by_length(dataset, hparams, max_length, pad_batch=static_shapes,
                            rows_multiple=replicas)
  if hparams.packed_batches:
    batches = batches.map(single_segments)
  return without_autotuning(batches.prefetch(2))


def num_buckets(dataset, hparams) -> int:
  """Bucket shapes the training stream can produce: the bound on XLA compilations."""
  if hparams.packed_batches:
    return 1
  max_length = hparams.max_length or _longest(dataset)
  return len(bucket_boundaries(max_length, hparams.min_length_bucket,
                               hparams.length_bucket_step))


def _longest(dataset) -> int:
  return int(dataset.map(example_length).reduce(tf.constant(1), tf.maximum))
