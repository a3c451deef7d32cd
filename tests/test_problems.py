"""Generated problems: the promised distribution, determinism, disjoint splits, datagen."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from t2tlite import registry
from t2tlite.problems.problem import ProblemError


@pytest.fixture(scope="module")
def reverse_pairs():
  problem = registry.problem("algorithmic_reverse")
  return {split: list(problem.text_pairs(split)) for split in ("train", "dev", "test")}


def test_reverse_pairs_are_reversed_digit_sequences(reverse_pairs):
  lengths = []
  for source, target in reverse_pairs["train"][:5000]:
    symbols = source.split()
    assert 1 <= len(symbols) <= 20 and all(s in "0123456789" and len(s) == 1 for s in symbols)
    assert target.split() == symbols[::-1]
    lengths.append(len(symbols))
  assert set(lengths) == set(range(1, 21))  # Every length occurs.


def test_copy_targets_equal_sources():
  for source, target in list(registry.problem("algorithmic_copy").text_pairs("dev"))[:200]:
    assert source == target


def test_splits_have_the_promised_sizes_and_are_disjoint(reverse_pairs):
  sizes = {split: len(pairs) for split, pairs in reverse_pairs.items()}
  assert sizes == {"train": 100000, "dev": 1000, "test": 1000}
  sources = {split: {s for s, _ in pairs} for split, pairs in reverse_pairs.items()}
  assert len(sources["test"]) == 1000 and len(sources["dev"]) == 1000  # No repeats.
  assert not sources["train"] & sources["test"]
  assert not sources["train"] & sources["dev"]
  assert not sources["dev"] & sources["test"]


@pytest.mark.parametrize("seed", [0, 1, 7, 2026])
def test_bulk_draws_are_numpys_draws_call_by_call(seed):
  # The problem's own pattern (a length, then that many symbols) and sizes that need a redraw
  # often (n = 3 * 2**30 rejects a quarter of the values) or never draw (n = 1), across chunks.
  from t2tlite.problems.algorithmic import LemireDraws
  reference = np.random.default_rng([seed, 5])
  bulk = LemireDraws(np.random.default_rng([seed, 5]))
  asks = [(20, 1), (10, 13), (3 << 30, 5), (1, 3), (10, 7), (2**32 - 1, 4)] * 500
  asks += [(10, LemireDraws.CHUNK * 2 + 3), (20, 1)]  # Longer than a chunk.
  for n, count in asks:
    assert bulk.below(n, count) == reference.integers(0, n, size=count).tolist(), (n, count)


def test_generated_pairs_are_drawn_from_the_seeded_stream_as_numpy_draws_them():
  # The generator as written with per-call numpy draws (before the bulk draws), for dev.
  from t2tlite.problems.algorithmic import split_of
  problem = registry.problem("algorithmic_reverse")
  rng = np.random.default_rng([problem.options.seed, 1])
  expected, seen = [], set()
  while len(expected) < 1000:
    symbols = [str(s) for s in rng.integers(0, 10, size=int(rng.integers(1, 21))).tolist()]
    source = " ".join(symbols)
    if split_of(source) == "dev" and source not in seen:
      seen.add(source)
      expected.append((source, " ".join(symbols[::-1])))
  assert list(problem.text_pairs("dev")) == expected


def test_generation_is_deterministic(reverse_pairs):
  again = list(registry.problem("algorithmic_reverse").text_pairs("test"))
  assert again == reverse_pairs["test"]


def test_dataset_encodes_with_eos():
  problem = registry.problem("algorithmic_reverse")
  example = next(iter(problem.dataset("test")))
  source, target = next(problem.text_pairs("test"))
  encoders = problem.encoders()
  assert list(example["inputs"].numpy()) == encoders["inputs"].encode(source) + [1]
  assert encoders["targets"].decode(example["targets"].numpy()) == target


def test_encoder_rejects_unknown_tokens():
  encoder = registry.problem("algorithmic_reverse").encoders()["inputs"]
  with pytest.raises(ValueError, match="'x' is not in the vocabulary"):
    encoder.encode("1 x 2")


def test_datagen_writes_skips_finished_work_and_reads_back(tmp_path):
  problem = registry.problem("algorithmic_copy")
  problem.generate_data(str(tmp_path))
  files = sorted(os.listdir(tmp_path))
  assert files == ["algorithmic_copy-dev.inputs", "algorithmic_copy-dev.manifest.json",
                   "algorithmic_copy-dev.targets", "algorithmic_copy-dev.tfrecord",
                   "algorithmic_copy-test.inputs", "algorithmic_copy-test.manifest.json",
                   "algorithmic_copy-test.targets", "algorithmic_copy-test.tfrecord",
                   "algorithmic_copy-train.manifest.json", "algorithmic_copy-train.tfrecord"]
  mtimes = {f: os.path.getmtime(tmp_path / f) for f in files}
  time.sleep(0.05)
  problem.generate_data(str(tmp_path))
  assert {f: os.path.getmtime(tmp_path / f) for f in files} == mtimes  # Nothing redone.
  from_disk = [{k: v.numpy().tolist() for k, v in ex.items()}
               for ex in problem.dataset("test", str(tmp_path))]
  in_memory = [{k: v.numpy().tolist() for k, v in ex.items()} for ex in problem.dataset("test")]
  assert from_disk == in_memory
  lines = (tmp_path / "algorithmic_copy-test.inputs").read_text().splitlines()
  assert lines == [s for s, _ in problem.text_pairs("test")]


@pytest.mark.slow  # Minutes of training or datagen; CI covers the kind elsewhere.
def test_killed_datagen_leaves_nothing_a_rerun_trusts(tmp_path):
  """kill -9 mid-write leaves only *.incomplete files; the rerun writes complete ones."""
  code = ("import sys, time; from t2tlite import registry\n"
          "p = registry.problem('algorithmic_reverse')\n"
          "orig = p.text_pairs\n"
          "def slow(split, tmp_dir=None):\n"
          "  for i, pair in enumerate(orig(split, tmp_dir)):\n"
          "    if i == 500: print('halfway', flush=True); time.sleep(60)\n"
          "    yield pair\n"
          "p.text_pairs = slow\n"
          "p.generate_data(sys.argv[1])\n")
  proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                          text=True)
  assert proc.stdout.readline().strip() == "halfway"
  proc.kill()
  proc.wait()
  assert os.listdir(tmp_path) == ["algorithmic_reverse-train.tfrecord.incomplete"]
  problem = registry.problem("algorithmic_reverse")
  problem.generated = False  # Behave like a downloaded problem: data must come from datagen.
  with pytest.raises(ProblemError, match="run t2t-datagen"):
    problem.dataset("train", str(tmp_path))
  problem.generate_data(str(tmp_path))
  count = sum(1 for _ in problem.dataset("train", str(tmp_path)))
  assert count == 100000


def test_test_seed_draws_a_fresh_test_split_only(reverse_pairs):
  problem = registry.problem("algorithmic_reverse")
  problem.configure("test_seed=2026")
  fresh = list(problem.text_pairs("test"))
  assert list(problem.text_pairs("dev")) == reverse_pairs["dev"]  # Only test is redrawn.
  assert len(fresh) == len(reverse_pairs["test"]) and fresh != reverse_pairs["test"]
  assert len({s for s, _ in fresh} - {s for s, _ in reverse_pairs["test"]}) > len(fresh) // 2
  train = {s for s, _ in reverse_pairs["train"]}
  assert not train & {s for s, _ in fresh}  # The hash still keeps them out of training.
  assert all(t == " ".join(s.split()[::-1]) for s, t in fresh)
