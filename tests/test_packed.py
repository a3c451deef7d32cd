"""Packed batches: several pairs per row, each pair computed as if it were alone.

Truths: the same pairs through the ordinary (unpacked) graph, one per row;
masks built with Python loops; the paper's positional encoding written out;
the packer's rows read back token by token; real Multi30k text.
"""

import gzip
import os
import re

import numpy as np
import pytest

from tests.helpers import SHARED, TINY, paper_positional_encoding, run, tiny_hparams

LENGTH = 16


def random_pairs(rng, n, vocab=20, longest=9):
  """n pairs of ids in [2, vocab), each side 1..longest tokens then EOS (1)."""
  side = lambda: list(rng.integers(2, vocab, rng.integers(1, longest + 1))) + [1]
  return [side() for _ in range(n)], [side() for _ in range(n)]


def one_per_row(sequences, length):
  out = np.zeros((len(sequences), length), np.int32)
  for r, ids in enumerate(sequences):
    out[r, :len(ids)] = ids
  return out


def segments_of(row_ids, row_segments):
  """{segment id: its ids} of one packed row (segment 0 = padding, left out)."""
  return {int(k): [int(x) for x in row_ids[row_segments == k]]
          for k in np.unique(row_segments) if k}


# --- (1) A packed batch gives each pair its unpacked loss and gradients ---
@pytest.fixture(params=[("sinusoid", "post"), ("learned", "pre")], ids=lambda p: "-".join(p))
def twin_models(request):
  """The ordinary model and its packed twin, same weights, no dropout."""
  import keras
  from t2tlite.models.transformer import Transformer
  keras.utils.set_random_seed(3)
  position_encoding, layer_norm_position = request.param
  hp = tiny_hparams(dropout=0.0, attention_dropout=0.0, relu_dropout=0.0,
                    position_encoding=position_encoding, max_position=LENGTH,
                    layer_norm_position=layer_norm_position)
  plain = Transformer(hp)
  packed = Transformer(hp.replace(packed_batches=True, packed_length=LENGTH))
  packed.set_weights(plain.get_weights())
  return plain, packed


def losses_and_gradients(model, batch):
  """Per-token smoothed cross-entropy [b, t] and the gradients of the trainer's loss."""
  import tensorflow as tf
  from t2tlite.training import losses
  batch = {k: tf.constant(v) for k, v in batch.items()}
  with tf.GradientTape() as tape:
    logits = model(batch, training=True)
    sums = losses.token_loss_sums(logits, batch["targets"], 0.1)
    loss = sums.loss / sums.tokens
  grads = tape.gradient(loss, model.trainable_variables)
  xent, _ = losses.smoothed_cross_entropy(logits, batch["targets"], 0.1)
  return xent.numpy(), [tf.convert_to_tensor(g).numpy() for g in grads], float(sums.tokens)


def test_packed_rows_give_each_pair_its_unpacked_loss_and_gradients(twin_models):
  from t2tlite.data import packing
  plain, packed_model = twin_models
  sources, targets = random_pairs(np.random.default_rng(0), 9)
  packed = packing.pack(sources, targets, LENGTH)
  assert len(packed["targets"]) < len(targets)  # Rows really hold several pairs.
  plain_xent, plain_grads, plain_tokens = losses_and_gradients(
      plain, {"inputs": one_per_row(sources, LENGTH), "targets": one_per_row(targets, LENGTH)})
  packed_xent, packed_grads, packed_tokens = losses_and_gradients(packed_model, packed)
  assert packed_tokens == plain_tokens == sum(len(t) for t in targets)

  # Find each pair in the packed rows by its ids and compare its per-token losses.
  found = 0
  for r in range(len(packed["targets"])):
    for k, ids in segments_of(packed["targets"][r], packed["targets_segmentation"][r]).items():
      src = segments_of(packed["inputs"][r], packed["inputs_segmentation"][r])[k]
      i = next(i for i in range(len(targets)) if targets[i] == ids and sources[i] == src)
      where = packed["targets_segmentation"][r] == k
      np.testing.assert_allclose(packed_xent[r][where], plain_xent[i][:len(ids)],
                                 rtol=1e-5, atol=1e-5)
      found += 1
  assert found == len(targets)
  for g_packed, g_plain in zip(packed_grads, plain_grads):
    np.testing.assert_allclose(g_packed, g_plain, rtol=1e-4, atol=1e-6)


def test_without_segments_the_pairs_would_see_each_other(twin_models):
  """The control: packed rows through the ordinary graph change the losses."""
  from t2tlite.data import packing
  plain, packed_model = twin_models
  sources, targets = random_pairs(np.random.default_rng(0), 9)
  packed = packing.pack(sources, targets, LENGTH)
  with_segments, _, _ = losses_and_gradients(packed_model, packed)
  without, _, _ = losses_and_gradients(
      plain, {"inputs": packed["inputs"], "targets": packed["targets"]})
  later = (packed["targets_segmentation"] > 1)
  assert np.max(np.abs(with_segments - without)[later]) > 1e-3


def test_one_pair_per_row_features_leave_the_loss_unchanged(twin_models):
  """Evaluation batches of a packed model: each row one pair (input_pipeline.single_segments)."""
  import tensorflow as tf
  from t2tlite.training import input_pipeline
  plain, packed_model = twin_models
  sources, targets = random_pairs(np.random.default_rng(1), 4)
  batch = {"inputs": one_per_row(sources, LENGTH), "targets": one_per_row(targets, LENGTH)}
  features = {k: v.numpy() for k, v in input_pipeline.single_segments(
      {k: tf.constant(v) for k, v in batch.items()}).items()}
  real = batch["targets"] != 0  # Padded positions carry no loss and may differ.
  np.testing.assert_allclose(losses_and_gradients(packed_model, features)[0][real],
                             losses_and_gradients(plain, batch)[0][real], rtol=1e-5, atol=1e-5)


JAX_CHECK = """
import numpy as np, keras
from t2tlite.data import packing
from t2tlite.models.transformer import Transformer
from t2tlite.training import losses
from tests.helpers import tiny_hparams
assert keras.config.backend() == "jax"
keras.utils.set_random_seed(0)
hp = tiny_hparams(dropout=0.0, packed_length=16)
plain, packed_model = Transformer(hp), Transformer(hp.replace(packed_batches=True))
packed_model.set_weights(plain.get_weights())
rng = np.random.default_rng(0)
side = lambda: list(rng.integers(2, 20, rng.integers(1, 7))) + [1]
sources, targets = [side() for _ in range(8)], [side() for _ in range(8)]
packed = packing.pack(sources, targets, 16)
def rows(x):
  out = np.zeros((len(x), 16), np.int32)
  for i, ids in enumerate(x):
    out[i, :len(ids)] = ids
  return out
a = losses.token_loss_sums(packed_model(packed), packed["targets"], 0.1)
b = losses.token_loss_sums(plain({"inputs": rows(sources), "targets": rows(targets)}),
                           rows(targets), 0.1)
print(len(packed["targets"]), float(a.loss), float(b.loss), float(a.tokens), float(b.tokens))
"""


@pytest.mark.slow  # 15-22 s: a fresh process imports JAX and builds two models.
def test_packed_loss_equals_unpacked_under_jax():
  """The JAX training path runs the same keras.ops graph: same loss sum, packed or not."""
  import subprocess
  import sys
  from tests.helpers import REPO
  proc = subprocess.run([sys.executable, "-c", JAX_CHECK], capture_output=True, text=True,
                        cwd=REPO, timeout=300,
                        env=dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows, packed_loss, plain_loss, packed_tokens, plain_tokens = map(
      float, proc.stdout.split()[-5:])
  assert rows < 8 and packed_tokens == plain_tokens
  assert packed_loss == pytest.approx(plain_loss, rel=1e-5)


def test_sequence_counts_of_a_packed_batch_are_per_pair():
  """Sequence accuracy counts pairs, not rows: checked against a loop over the pairs."""
  from t2tlite.data import packing
  from t2tlite.training import losses
  rng = np.random.default_rng(6)
  sources, targets = random_pairs(rng, 30)
  packed = packing.pack(sources, targets, LENGTH)
  labels, segments = packed["targets"], packed["targets_segmentation"]
  predicted = np.where(rng.random(labels.shape) < 0.1, 0, labels)  # ~10% of tokens wrong.
  logits = np.eye(20, dtype=np.float32)[predicted] * 10.0
  sums = losses.token_loss_sums(logits, labels, 0.1, segments)
  pairs = right_pairs = 0
  for r in range(len(labels)):
    for k in set(segments[r].tolist()) - {0}:
      pairs += 1
      right_pairs += all(predicted[r][segments[r] == k] == labels[r][segments[r] == k])
  assert 0 < right_pairs < pairs == len(targets)
  assert (float(sums.sequences), float(sums.correct_sequences)) == (pairs, right_pairs)
  assert float(sums.correct) == np.sum((predicted == labels) & (labels != 0))
  rows = losses.token_loss_sums(logits, labels, 0.1)  # Without segments: one sequence a row.
  assert float(rows.sequences) == len(labels)


# --- (2) The masks against loops ---
def brute_force_masks(src_seg, tgt_seg):
  b, s = src_seg.shape
  t = tgt_seg.shape[1]
  enc = np.zeros((b, 1, s, s), bool)
  dec = np.zeros((b, 1, t, t), bool)
  cross = np.zeros((b, 1, t, s), bool)
  for n in range(b):
    for i in range(s):
      for j in range(s):
        enc[n, 0, i, j] = src_seg[n, j] != 0 and src_seg[n, i] == src_seg[n, j]
    for i in range(t):
      for j in range(t):
        dec[n, 0, i, j] = j <= i and tgt_seg[n, i] == tgt_seg[n, j]
      for j in range(s):
        cross[n, 0, i, j] = src_seg[n, j] != 0 and tgt_seg[n, i] == src_seg[n, j]
  return enc, dec, cross


def test_packed_attention_masks_match_loops():
  from t2tlite.data import packing
  from t2tlite.layers.attention import packed_attention_masks
  sources, targets = random_pairs(np.random.default_rng(2), 12)
  packed = packing.pack(sources, targets, LENGTH)
  got = packed_attention_masks(packed["inputs_segmentation"], packed["targets_segmentation"])
  want = brute_force_masks(packed["inputs_segmentation"], packed["targets_segmentation"])
  for name, g, w in zip(("encoder self", "decoder self", "encoder-decoder"), got, want):
    assert np.array_equal(np.asarray(g), w), name
  # Real queries attend to something, and only within their own pair.
  assert np.all(want[1].any(-1)[:, 0][packed["targets_segmentation"] > 0])


# --- (3) Positions restart with every pair ---
def test_positions_restart_at_zero_in_every_pair():
  from t2tlite.data import packing
  sources, targets = random_pairs(np.random.default_rng(3), 12)
  packed = packing.pack(sources, targets, LENGTH)
  starts = 0
  for side in ("inputs", "targets"):
    for ids, seg, pos in zip(packed[side], packed[f"{side}_segmentation"],
                             packed[f"{side}_position"]):
      for k in set(seg.tolist()) - {0}:
        assert pos[seg == k].tolist() == list(range(int(np.sum(seg == k))))
        starts += 1
      assert not pos[seg == 0].any() and not ids[seg == 0].any()
  assert starts == 2 * len(targets)


@pytest.mark.parametrize("kind", ["sinusoid", "learned"])
def test_position_layers_read_each_tokens_own_position(kind):
  from t2tlite.layers.embedding import LearnedPositionEmbedding, SinusoidalPositionEncoding
  positions = np.array([[0, 1, 2, 0, 1, 0, 0, 0], [0, 1, 2, 3, 4, 5, 0, 1]], np.int32)
  x = np.zeros((2, 8, 6), np.float32)
  if kind == "sinusoid":
    table = paper_positional_encoding(8, 6)
    out = SinusoidalPositionEncoding()(x, positions=positions)
  else:
    layer = LearnedPositionEmbedding(8)
    layer.build(x.shape)
    table = layer.positions.numpy()
    out = layer(x, positions=positions)
  np.testing.assert_allclose(np.asarray(out), table[positions], atol=1e-5)


# --- (4) The packer ---
def check_packing(sources, targets, packed, length):
  """Every pair exactly once, whole and in order within its segment; rows of `length`."""
  assert all(packed[k].shape == (len(packed["targets"]), length) for k in packed)
  seen = []
  for r in range(len(packed["targets"])):
    src = segments_of(packed["inputs"][r], packed["inputs_segmentation"][r])
    tgt = segments_of(packed["targets"][r], packed["targets_segmentation"][r])
    assert src.keys() == tgt.keys() == set(range(1, len(tgt) + 1))
    assert sum(map(len, src.values())) <= length and sum(map(len, tgt.values())) <= length
    for k in tgt:
      seen.append((tuple(src[k]), tuple(tgt[k])))
      # A segment is contiguous: its tokens sit between the previous and next segment.
      where = np.flatnonzero(packed["targets_segmentation"][r] == k)
      assert np.array_equal(where, np.arange(where[0], where[0] + len(where)))
  assert sorted(seen) == sorted(zip(map(tuple, sources), map(tuple, targets)))


def test_packer_places_every_pair_once_within_the_row_length():
  from t2tlite.data import packing
  sources, targets = random_pairs(np.random.default_rng(4), 200, longest=15)
  packed = packing.pack(sources, targets, LENGTH)
  check_packing(sources, targets, packed, LENGTH)


def test_packer_refuses_a_pair_longer_than_the_row():
  from t2tlite.data import packing
  with pytest.raises(ValueError, match="longer than the row length 4"):
    packing.first_fit([2, 5], [1, 1], 4)


def test_packed_training_stream_and_one_pass_of_the_packer(tmp_path):
  """training_dataset packs (static [rows, L] batches); pack_dataset keeps every pair once."""
  from t2tlite.data import records
  from t2tlite.training import input_pipeline
  sources, targets = random_pairs(np.random.default_rng(5), 300, longest=12)
  dataset = records.in_memory_dataset(
      [{"inputs": s, "targets": t} for s, t in zip(sources, targets)])
  hp = tiny_hparams(batch_size=128, packed_batches=True, packed_length=LENGTH)
  batch = next(iter(input_pipeline.training_dataset(dataset, hp, seed=1)))
  assert {k: tuple(v.shape) for k, v in batch.items()} == {
      k: (128 // LENGTH, LENGTH) for k in
      ("inputs", "targets", "inputs_segmentation", "targets_segmentation", "inputs_position",
       "targets_position")}
  rows = list(input_pipeline.pack_dataset(dataset, LENGTH, window=64, seed=1)
              .batch(1000).as_numpy_iterator())
  assert len(rows) == 1
  check_packing(sources, targets, rows[0], LENGTH)
  assert input_pipeline.num_buckets(dataset, hp) == 1


def multi30k_lengths(limit):
  """Token counts (words and punctuation, + EOS) of the first `limit` Multi30k train pairs."""
  directory = os.path.join(SHARED, "data", "multi30k")
  if not os.path.isfile(os.path.join(directory, "train.en.gz")):
    pytest.skip("no Multi30k in ../shared/data/multi30k")

  def lengths(lang):
    with gzip.open(os.path.join(directory, f"train.{lang}.gz"), "rt", encoding="utf-8") as f:
      return [len(re.findall(r"\w+|[^\w\s]", line)) + 1 for _, line in zip(range(limit), f)]

  return lengths("en"), lengths("de")


def test_packing_efficiency_on_real_multi30k_text():
  """8192 real pairs in two windows of 4096 (the trainer's): counted token by token."""
  from t2tlite.data import packing
  from t2tlite.training.input_pipeline import PACK_WINDOW
  source_lengths, target_lengths = multi30k_lengths(2 * PACK_WINDOW)
  length = 64
  rows = real = 0
  for start in range(0, len(target_lengths), PACK_WINDOW):
    s = source_lengths[start:start + PACK_WINDOW]
    t = target_lengths[start:start + PACK_WINDOW]
    sources = [[2] * n for n in s]  # Any non-pad ids: the packer reads lengths only.
    targets = [[3] * n for n in t]
    packed = packing.pack(sources, targets, length)
    check_packing(sources, targets, packed, length)
    for row_s, row_t in zip(packed["inputs"], packed["targets"]):  # Brute force: every position.
      rows += 1
      real += sum(1 for x in row_s if x) + sum(1 for x in row_t if x)
  assert real == sum(source_lengths) + sum(target_lengths)
  efficiency = real / (rows * 2 * length)
  # No packing can beat the longer side filling ceil(tokens / length) rows per window exactly.
  bound = sum(
      (sum(source_lengths[a:a + PACK_WINDOW]) + sum(target_lengths[a:a + PACK_WINDOW])) /
      (2 * length) for a in range(0, len(target_lengths), PACK_WINDOW)) / sum(
      -(-max(sum(source_lengths[a:a + PACK_WINDOW]), sum(target_lengths[a:a + PACK_WINDOW]))
        // length) for a in range(0, len(target_lengths), PACK_WINDOW))
  assert efficiency <= bound
  assert efficiency >= 0.97 * bound, (efficiency, bound)
  # Length buckets (step 1.1, both sides padded to the bucket of the longer) do worse.
  from t2tlite.training import input_pipeline
  boundaries = input_pipeline.bucket_boundaries(256)
  bucketed = (sum(source_lengths) + sum(target_lengths)) / sum(
      2 * boundaries[input_pipeline.bucket_of(max(a, b), boundaries)]
      for a, b in zip(source_lengths, target_lengths))
  assert efficiency > bucketed


def test_saved_numpy_batches_keep_the_packed_features(tmp_path):
  """Packed batches saved for a trainer without TensorFlow come back with their segments."""
  from t2tlite.training import numpy_batches
  hp, saved = save_tiny_packed_batches(tmp_path, steps=3)
  saved.check_hparams(hp)
  batch = saved.train_batch(2)
  assert sorted(batch) == sorted(
      ["inputs", "targets", "inputs_segmentation", "targets_segmentation", "inputs_position",
       "targets_position"]) and batch["targets"].shape == (128 // LENGTH, LENGTH)
  assert batch["targets_segmentation"].max() > 1  # Several pairs in a row.
  dev = next(saved.dev_batches())
  assert np.array_equal(dev["targets_segmentation"], (dev["targets"] != 0).astype(np.int32))
  with pytest.raises(numpy_batches.NumpyBatchesError, match="packed_length: 16 there vs 32 now"):
    saved.check_hparams(hp.replace(packed_length=32))


def save_tiny_packed_batches(tmp_path, steps):
  """(hparams, SavedBatches) of `steps` packed training batches of the tiny problem."""
  from t2tlite.training import numpy_batches
  hp = tiny_hparams(batch_size=128, packed_batches=True, packed_length=LENGTH,
                    input_vocab_size=12, target_vocab_size=12)
  numpy_batches.write(tiny_problem_with_data(tmp_path), str(tmp_path / "data"), hp,
                      str(tmp_path / "saved"), steps=steps, seed=1)
  return hp, numpy_batches.SavedBatches(str(tmp_path / "saved"))


def tiny_problem_with_data(tmp_path):
  from tests.helpers import tiny_problem
  problem = tiny_problem()
  problem.split_sizes = {"train": 200, "dev": 20, "test": 20}
  problem.generate_data(str(tmp_path / "data"))
  return problem


# --- A packed training run, end to end ---
@pytest.mark.slow
def test_trainer_trains_packed_then_decodes(tmp_path):
  data, out = str(tmp_path / "data"), str(tmp_path / "run")
  run("t2t-datagen", "--problem=algorithmic_reverse", f"--data_dir={data}")
  proc = run("t2t-trainer", "--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
             TINY + ",packed_batches=true,packed_length=32,xla=false", f"--data_dir={data}",
             f"--output_dir={out}", "--train_steps=6", "--eval_every=6", "--eval_steps=2",
             "--log_every=3", "--eval_decode_lines=4", "--save_checkpoints_steps=6")
  assert re.search(r"step 6/6 \| loss [\d.]+", proc.stderr), proc.stderr[-2000:]
  assert os.path.exists(os.path.join(out, "ckpt-6.index"))
  decoded = str(tmp_path / "decoded.txt")
  sources = tmp_path / "sources.txt"
  sources.write_text("3 4 5\n6 7\n")
  run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out}",
      f"--decode_from_file={sources}", f"--decode_to_file={decoded}",
      "--decode_hparams=beam_size=1,extra_length=5")
  assert len(open(decoded).read().splitlines()) == 2


def test_row_length_and_the_longest_pair_a_packed_stream_keeps():
  from t2tlite.hparams_record import HParamsError
  hp = tiny_hparams(max_length=256)
  assert hp.longest_training_side == 256 and not hp.packed_batches  # Off by default.
  assert hp.replace(packed_batches=True).packed_row_length == 256  # t2t: rows of max_length.
  assert hp.replace(packed_batches=True, packed_length=64).longest_training_side == 64
  assert hp.replace(packed_batches=True, packed_length=512).longest_training_side == 256
  assert hp.replace(max_length=0, packed_batches=True, packed_length=32).longest_training_side == 32
  with pytest.raises(HParamsError, match="packed_batches needs a row length"):
    hp.replace(max_length=0, packed_batches=True)


def test_saved_batches_past_the_last_are_drawn_again_in_a_new_order(tmp_path, monkeypatch):
  """Pass 1 is the saved order; each later pass draws every saved batch once, a file at a
  time, in an order that differs per pass and is the same for a resumed run."""
  from t2tlite.training import numpy_batches
  monkeypatch.setattr(numpy_batches, "CHUNK", 3)  # Files of 3, 3 and 1 batches.
  _, saved = save_tiny_packed_batches(tmp_path, steps=7)
  stored = []  # The batches as written, read straight from the files.
  for name in sorted(f for f in os.listdir(tmp_path / "saved") if f.startswith("train-")):
    with np.load(tmp_path / "saved" / name) as npz:
      names = [k for k in npz.files if re.fullmatch(r"targets_\d+", k)]
      stored += [npz[k] for k in sorted(names, key=lambda k: int(k.rsplit("_", 1)[1]))]
  assert len(stored) == 7 and len({a.tobytes() for a in stored}) == 7

  def drawn(stream, n):
    return [next(stream)["targets"].tobytes() for _ in range(n)]
  first_three = drawn(numpy_batches.BatchStream(saved), 21)
  assert first_three[:7] == [a.tobytes() for a in stored]
  index = {a.tobytes(): i for i, a in enumerate(stored)}
  orders = [[index[b] for b in first_three[7 * p:7 * p + 7]] for p in range(3)]
  for order in orders[1:]:
    assert sorted(order) == list(range(7))  # Every batch once per pass.
    files = [i // 3 for i in order]
    assert files == sorted(files, key=files.index)  # A file's batches stay together.
  assert len({tuple(o) for o in orders}) == 3
  resumed = numpy_batches.BatchStream(numpy_batches.SavedBatches(str(tmp_path / "saved")), 10)
  assert drawn(resumed, 11) == first_three[10:]
