"""Translation problems on real text: Multi30k, translate_files, WMT under tfds mock data.

Truth here is the data itself: the raw files in ../shared/data (line counts
from their PROVENANCE.md), sentencepiece's own Python encoder beside the
in-graph tensorflow_text one, and brute-force counts over the written shards.
"""

import gzip
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from t2tlite import registry
from t2tlite.data import parallel_text, subword
from t2tlite.problems import translate
from t2tlite.problems.problem import Problem, ProblemError
from t2tlite.training import input_pipeline
from tests.helpers import SHARED as SHARED_ROOT, TINY_SHAPE, command, hparams_flag, run

SHARED = os.path.join(SHARED_ROOT, "data")
MULTI30K = os.path.join(SHARED, "multi30k")
WMT = os.path.join(SHARED, "wmt")
needs_data = pytest.mark.skipif(not os.path.isdir(MULTI30K), reason="../shared/data absent")


def gz_lines(path):
  with gzip.open(path, "rt", encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f]


def plain_lines(path):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f]


def decoded(dataset, encoder, key):
  return [encoder.decode(ex[key].numpy()) for ex in dataset]


@pytest.fixture(scope="module")
def m30k(tmp_path_factory):
  """multi30k_ende datagen output from the real Multi30k files."""
  data_dir = str(tmp_path_factory.mktemp("m30k"))
  problem = registry.problem("multi30k_ende")
  problem.generate_data(data_dir, MULTI30K)
  return problem, data_dir


@needs_data
def test_multi30k_vocabulary_size_and_split_counts(m30k):
  problem, data_dir = m30k
  encoder = problem.encoders(data_dir)["targets"]
  assert abs(encoder.vocab_size - 8000) <= 80  # Within 1% of the requested size.
  counts = {split: problem.split_stats(data_dir, split)["pairs_written"]
            for split in ("train", "dev", "test")}
  assert counts == {"train": 29000, "dev": 1014, "test": 1000}  # PROVENANCE.md's counts.
  assert sum(1 for _ in problem.dataset("dev", data_dir)) == 1014


@needs_data
def test_multi30k_shards_decode_to_the_raw_test_text(m30k):
  problem, data_dir = m30k
  encoder = problem.encoders(data_dir)["inputs"]
  test = problem.dataset("test", data_dir)
  assert decoded(test, encoder, "inputs") == gz_lines(f"{MULTI30K}/test_2016_flickr.en.gz")
  assert decoded(test, encoder, "targets") == gz_lines(f"{MULTI30K}/test_2016_flickr.de.gz")
  # Shard ids are exactly the in-graph (tensorflow_text) ids of the raw text, plus EOS.
  in_graph = encoder.encode_batch(gz_lines(f"{MULTI30K}/test_2016_flickr.de.gz"))
  assert [ex["targets"].numpy().tolist() for ex in test] == [ids + [1] for ids in in_graph]
  # The text t2t-decoder reads is the raw test set, line for line.
  sources, references = problem.eval_text("test", data_dir)
  assert references == gz_lines(f"{MULTI30K}/test_2016_flickr.de.gz") and len(sources) == 1000


@needs_data
def test_in_graph_tokenizer_equals_sentencepiece_and_round_trips(m30k):
  """tf_text ids == sentencepiece ids, and decode(encode(line)) == line, on every line."""
  problem, data_dir = m30k
  encoder = problem.encoders(data_dir)["inputs"]
  reference = spm.SentencePieceProcessor(model_file=encoder.model_path)
  texts = {
      "newstest2014.en": plain_lines(f"{WMT}/newstest2014.en-de.en"),
      "newstest2014.de": plain_lines(f"{WMT}/newstest2014.en-de.de"),
      "test_2016.en": gz_lines(f"{MULTI30K}/test_2016_flickr.en.gz"),
      "test_2016.de": gz_lines(f"{MULTI30K}/test_2016_flickr.de.gz"),
  }
  for name, lines in texts.items():
    ids = encoder.encode_batch(lines)
    assert ids == reference.encode(lines), name
    assert [encoder.encode(line) for line in lines[:50]] == ids[:50]
    changed = [i for i, (line, back) in enumerate(zip(lines, encoder.decode_batch(ids)))
               if back != line]
    assert changed == [], f"{name}: {len(changed)} lines do not round-trip"
    assert [encoder.decode(x) for x in ids[:50]] == lines[:50]
  assert sum(len(v) for v in texts.values()) == 2 * 3003 + 2 * 1000


@needs_data
def test_datagen_tokenizers_agree(m30k):
  """The bulk (sentencepiece C++) and in-graph (tensorflow_text) datagen paths give one result."""
  from t2tlite.problems.translate import tokenize_pairs
  problem, data_dir = m30k
  encoder = problem.encoders(data_dir)["inputs"]
  pairs = list(problem.text_pairs("dev", MULTI30K))
  runs = [list(tokenize_pairs(iter(pairs), encoder, chunk=300, in_graph=flag))
          for flag in (False, True)]
  assert runs[0] == runs[1] and sum(len(chunk[0]) for chunk in runs[0]) == 1014
  assert [p for chunk in runs[0] for p in zip(chunk[0], chunk[1])] == pairs


@needs_data
def test_datagen_rerun_skips_finished_work(m30k):
  problem, data_dir = m30k
  before = {f: os.path.getmtime(os.path.join(data_dir, f)) for f in os.listdir(data_dir)}
  time.sleep(0.05)
  registry.problem("multi30k_ende").generate_data(data_dir, MULTI30K)
  assert {f: os.path.getmtime(os.path.join(data_dir, f)) for f in os.listdir(data_dir)} == before


@needs_data
def test_existing_vocabulary_is_never_silently_replaced(m30k, tmp_path):
  problem, data_dir = m30k
  path = problem.vocab_path(data_dir)
  with pytest.raises(subword.VocabularyError, match="never replaced silently"):
    subword.load_or_train(path, 9000, lambda: iter(["unused"]))
  # Asking datagen for another size in the same data_dir is refused before any work.
  other = registry.problem("multi30k_ende")
  other.configure("vocab_size=9000")
  with pytest.raises(ProblemError, match="vocab_size=8000 not 9000"):
    other.generate_data(data_dir, MULTI30K)
  assert not any(f.startswith("vocab.multi30k_ende.9000") for f in os.listdir(data_dir))


@needs_data
def test_lowercase_option_lowercases_inside_the_vocabulary(m30k, tmp_path):
  """lowercase=true: every encode equals encoding line.lower() (str.lower, the truth), ß kept."""
  cased_problem, cased_dir = m30k
  assert not cased_problem.encoders(cased_dir)["inputs"].lowercases
  problem = registry.problem("multi30k_ende")
  problem.configure("lowercase=true,vocab_size=2000")
  data_dir = str(tmp_path)
  problem.generate_data(data_dir, MULTI30K)
  encoder = problem.encoders(data_dir)["inputs"]
  assert encoder.lowercases
  sources = gz_lines(f"{MULTI30K}/test_2016_flickr.en.gz")
  targets = gz_lines(f"{MULTI30K}/test_2016_flickr.de.gz")
  for lines in (sources, targets):
    ids = encoder.encode_batch(lines)  # In-graph (tensorflow_text), as an exported model.
    assert ids == encoder.processor.encode([line.lower() for line in lines])
    assert encoder.decode_batch(ids) == [line.lower() for line in lines]
  assert any("ß" in line for line in targets)  # Lowercasing is not case folding (ß -> ss).
  test = problem.dataset("test", data_dir)
  assert decoded(test, encoder, "targets") == [line.lower() for line in targets]
  # Scores compare lowercase with lowercase; the decoder reads the sources as written.
  assert problem.eval_text("test", data_dir) == (sources, [line.lower() for line in targets])
  with pytest.raises(subword.VocabularyError, match="lowercases but lowercase=False"):
    subword.load_or_train(problem.vocab_path(data_dir), 2000, lambda: iter(["unused"]))
  rules = dict(subword.lowercase_rules())
  for char in "AZÄÖÜÀÉΣЖİ":
    assert rules[f"{ord(char):X}"] == " ".join(f"{ord(c):X}" for c in char.lower())
  assert not any(f"{ord(c):X}" in rules for c in "azäößé1 ,.")


@pytest.mark.slow  # Minutes of training or datagen; CI covers the kind elsewhere.
@needs_data
def test_max_length_drop_count_matches_a_pass_over_the_shards(m30k):
  problem, data_dir = m30k
  longest = [max(int(tf.shape(ex["inputs"])[0]), int(tf.shape(ex["targets"])[0]))
             for ex in problem.dataset("train", data_dir)]
  for max_length in (16, 24, 40):
    expected = sum(length > max_length for length in longest)
    assert problem.count_longer_than(data_dir, "train", max_length) == expected > 0


@needs_data
def test_padding_efficiency_and_paper_batch_on_multi30k(m30k):
  """Length buckets keep >= 90% of batch slots real at 4096 tokens; 25000 tokens fit a step."""
  problem, data_dir = m30k
  hp = registry.hparams("transformer_base").replace(batch_size=4096)
  real = padded = 0
  batches = input_pipeline.training_dataset(problem.dataset("train", data_dir), hp, seed=1)
  for batch in batches.take(300):
    for side in ("inputs", "targets"):
      real += int(tf.reduce_sum(tf.cast(batch[side] != 0, tf.int32)))
      padded += int(tf.size(batch[side]))
  assert real / padded >= 0.90, real / padded
  big = hp.replace(batch_size=25000)
  sides = {"inputs": [], "targets": []}
  for batch in input_pipeline.training_dataset(problem.dataset("train", data_dir), big,
                                               seed=1).take(20):
    for side in sides:
      assert int(tf.size(batch[side])) <= 25000
      sides[side].append(int(tf.reduce_sum(tf.cast(batch[side] != 0, tf.int32))))
  assert np.mean(sides["inputs"]) > 20000 and np.mean(sides["targets"]) > 20000


@needs_data
def test_killed_datagen_leaves_nothing_trusted_and_rerun_completes(m30k, tmp_path):
  problem, data_dir = m30k
  fresh = tmp_path / "data"
  fresh.mkdir()
  for name in os.listdir(data_dir):  # Same vocabulary: only the shards are redone.
    if name.startswith("vocab."):
      shutil.copy(os.path.join(data_dir, name), fresh / name)
  code = ("import sys, time; from t2tlite import registry\n"
          "p = registry.problem('multi30k_ende')\n"
          "orig = p.source_target_pairs\n"
          "def slow(split, tmp_dir):\n"
          "  for i, pair in enumerate(orig(split, tmp_dir)):\n"
          "    if i == 5000: print('halfway', flush=True); time.sleep(60)\n"
          "    yield pair\n"
          "p.source_target_pairs = slow\n"
          "p.generate_data(sys.argv[1], sys.argv[2])\n")
  proc = subprocess.Popen([sys.executable, "-c", code, str(fresh), MULTI30K],
                          stdout=subprocess.PIPE, text=True)
  assert proc.stdout.readline().strip() == "halfway"
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  leftovers = sorted(os.listdir(fresh))
  assert all(f.startswith("vocab.") or f.endswith((".incomplete", "options.json"))
             for f in leftovers), leftovers
  with pytest.raises(ProblemError, match="run t2t-datagen"):
    registry.problem("multi30k_ende").dataset("train", str(fresh))
  registry.problem("multi30k_ende").generate_data(str(fresh), MULTI30K)
  assert sum(1 for _ in registry.problem("multi30k_ende").dataset("train", str(fresh))) == 29000
  assert not any(f.endswith(".incomplete") for f in os.listdir(fresh))


@needs_data
def test_multi30k_downloads_missing_files(tmp_path, monkeypatch):
  """Absent raw files are fetched from base_url (here a file:// mirror of the real files)."""
  raw = tmp_path / "raw"
  problem = registry.problem("multi30k_enfr")
  monkeypatch.setattr(type(problem), "base_url",
                      "file://" + os.path.abspath(MULTI30K) + "/")
  pairs = list(problem.text_pairs("test", str(raw)))
  assert sorted(os.listdir(raw)) == ["test_2016_flickr.en.gz", "test_2016_flickr.fr.gz"]
  assert pairs[0][1] == gz_lines(f"{MULTI30K}/test_2016_flickr.fr.gz")[0]
  assert len(pairs) == 1000
  monkeypatch.setattr(type(problem), "base_url", "file:///nonexistent/")
  with pytest.raises(ProblemError, match="downloading file:///nonexistent/val.en.gz failed"):
    list(problem.text_pairs("dev", str(tmp_path / "empty")))


@needs_data
def test_translate_files_on_the_opennmt_wmt_sample(tmp_path):
  toy = os.path.join(WMT, "opennmt_toy_ende")
  problem = registry.problem("translate_files")
  problem.configure(
      f"train_source={toy}/src-train.txt.gz,train_target={toy}/tgt-train.txt.gz,"
      f"dev_source={toy}/src-val.txt,dev_target={toy}/tgt-val.txt,"
      f"test_source={toy}/src-test.txt,test_target={toy}/tgt-test.txt,vocab_size=4000")
  problem.generate_data(str(tmp_path))
  counts = {s: problem.split_stats(str(tmp_path), s)["pairs_written"]
            for s in ("train", "dev", "test")}
  assert counts == {"train": 10000, "dev": 3000, "test": 2737}
  # The trainer and decoder see only data_dir: options come back from it.
  again = registry.problem("translate_files")
  encoder = again.encoders(str(tmp_path))["targets"]
  assert abs(encoder.vocab_size - 4000) <= 40
  assert decoded(again.dataset("test", str(tmp_path)).take(100), encoder, "targets") == \
      plain_lines(f"{toy}/tgt-test.txt")[:100]


@needs_data
def test_translate_files_drops_and_counts_empty_pairs(tmp_path):
  """nc-5k has 13 pairs with an empty side (PROVENANCE.md); dev/test are optional."""
  nc = os.path.join(WMT, "moses_nc-5k_fr-en")
  problem = registry.problem("translate_files")
  problem.configure(f"train_source={nc}/nc-5k.fr,train_target={nc}/nc-5k.en,vocab_size=2000")
  problem.generate_data(str(tmp_path))
  stats = problem.split_stats(str(tmp_path), "train")
  assert (stats["pairs_read"], stats["dropped_empty_side"], stats["pairs_written"]) == \
      (5000, 13, 4987)
  assert not problem.has_data("dev", str(tmp_path))
  assert problem.has_data("train", str(tmp_path))


def _records(problem, data_dir, split):
  return [(list(ex["inputs"].numpy()), list(ex["targets"].numpy()))
          for ex in problem.dataset(split, data_dir)]


@needs_data
def test_subword_dropout_samples_train_segmentations_and_keeps_dev(tmp_path):
  """BPE-dropout: every train copy spells its line exactly in finer, differing pieces.

  Truths: decoding (sentencepiece's own) gives the raw lines back; sentencepiece's
  deterministic encode is the segmentation dev must keep; BPE with (nearly) every
  merge dropped leaves single characters.
  """
  src, tgt = f"{MULTI30K}/test_2016_flickr.en.gz", f"{MULTI30K}/test_2016_flickr.de.gz"
  dev_src, dev_tgt = f"{MULTI30K}/val.en.gz", f"{MULTI30K}/val.de.gz"
  files = (f"train_source={src},train_target={tgt},dev_source={dev_src},dev_target={dev_tgt},"
           "vocab_size=1000")

  def generate(data_dir, dropout, samples):
    problem = registry.problem("translate_files")
    problem.configure(f"{files},subword_dropout={dropout},subword_samples={samples}")
    problem.generate_data(str(data_dir))
    return problem, problem.encoders(str(data_dir))["targets"]

  problem, encoder = generate(tmp_path / "a", 0.1, 3)
  sources, targets = gz_lines(src), gz_lines(tgt)
  train = _records(problem, str(tmp_path / "a"), "train")
  assert len(train) == 3 * len(sources)
  assert [encoder.decode(t) for _, t in train] == targets * 3
  assert [encoder.decode(s) for s, _ in train] == sources * 3
  plain = [ids + [1] for ids in encoder.processor.encode(targets)]
  copies = [[t for _, t in train[k * len(targets):(k + 1) * len(targets)]] for k in range(3)]
  for copy in copies:
    assert sum(a != b for a, b in zip(copy, plain)) > len(plain) // 2
    assert sum(map(len, copy)) > 1.1 * sum(map(len, plain))  # Finer pieces.
  assert copies[0] != copies[1] != copies[2]
  # Dev keeps the deterministic segmentation the decoder will read.
  assert [t for _, t in _records(problem, str(tmp_path / "a"), "dev")] == \
      [ids + [1] for ids in encoder.processor.encode(gz_lines(dev_tgt))]
  # Reproducible: a second datagen writes the same records.
  again, _ = generate(tmp_path / "b", 0.1, 3)
  assert _records(again, str(tmp_path / "b"), "train") == train
  # Merges dropped almost always: (nearly) every piece is one character.
  rough, rough_encoder = generate(tmp_path / "c", 0.99, 1)
  pieces = [rough_encoder.processor.id_to_piece(int(i))
            for _, t in _records(rough, str(tmp_path / "c"), "train") for i in t[:-1]]
  assert sum(len(p) == 1 for p in pieces) > 0.97 * len(pieces)


def test_subword_dropout_option_errors():
  problem = registry.problem("multi30k_ende")
  with pytest.raises(Exception, match="subword_samples=4 must be 1, or more with subword_dropout"):
    problem.configure("subword_samples=4")
  with pytest.raises(Exception, match=r"subword_dropout=1.0 must be in \[0, 1\)"):
    problem.configure("subword_dropout=1.0")
  with pytest.raises(Exception, match="subword_dropout needs vocab_type=bpe .*, not .unigram."):
    problem.configure("subword_dropout=0.1,vocab_type=unigram")
  with pytest.raises(ValueError, match="not in-graph"):
    next(translate.tokenize_pairs(iter([("a", "b")]), None, in_graph=True, subword_dropout=0.1))


def write(path, text, mode="w"):
  with open(path, mode) as f:
    f.write(text)
  return str(path)


def test_parallel_text_errors_name_the_files_and_lines(tmp_path):
  a = write(tmp_path / "a.en", "one\ntwo\nthree\n")
  b = write(tmp_path / "b.de", "eins\nzwei\n")
  with pytest.raises(parallel_text.ParallelTextError,
                     match=r"a\.en has 3 lines but .*b\.de has 2"):
    list(parallel_text.read_parallel(a, b))
  bad = write(tmp_path / "bad.de", b"eins\nzwei\ndr\xffei\n", "wb")
  with pytest.raises(parallel_text.ParallelTextError, match=r"bad\.de: line 3 is not valid UTF-8"):
    list(parallel_text.read_parallel(a, bad))
  with pytest.raises(parallel_text.ParallelTextError, match=r"missing\.de: no such file"):
    list(parallel_text.read_parallel(a, str(tmp_path / "missing.de")))
  # No trailing newline counts as a line; gzip is detected by content, not name.
  c = write(tmp_path / "c.de", "eins\n\ndrei")
  with gzip.open(tmp_path / "d", "wt") as f:
    f.write("one\ntwo\nthree\n")
  stats = parallel_text.LineStats()
  pairs = list(parallel_text.drop_empty(parallel_text.read_parallel(str(tmp_path / "d"), c),
                                        stats))
  assert pairs == [("one", "eins"), ("three", "drei")]
  assert (stats.read, stats.kept, stats.empty) == (3, 2, 1)


def test_text_flags_read_pipes_plain_and_gzip(tmp_path):
  """A flag may name a pipe (`<(zcat ...)`, /dev/stdin): it opens once, so every line
  arrives (opening twice to sniff gzip read nothing, or waited forever on a FIFO)."""
  lines = ["ein Hund läuft .", "", "zwei Katzen"]
  text = write(tmp_path / "text.de", "\n".join(lines) + "\n")
  reader = write(tmp_path / "reader.py", "import json, sys\n"
                 "from t2tlite.data import parallel_text\n"
                 "print(json.dumps(list(parallel_text.read_lines(sys.argv[1]))))\n")
  for producer in (f"cat {text}", f"gzip -c {text}"):
    proc = subprocess.run(["bash", "-c", f"{sys.executable} {reader} <({producer})"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(proc.stdout) == lines, producer
  # The command as a user types it: t2t-bleu on process substitutions scores what it
  # scores on the same text in regular files.
  hyp = write(tmp_path / "hyp.de", "ein Hund läuft über die Wiese .\nzwei Katzen schlafen .\n")
  ref = tmp_path / "ref.de.gz"
  with gzip.open(ref, "wt", encoding="utf-8") as f:
    f.write("ein Hund rennt über die Wiese .\nzwei Katzen schlafen .\n")
  scores = []
  bleu = " ".join(shlex.quote(part) for part in command("t2t-bleu"))
  for translation, reference in ((hyp, str(ref)), (f"<(cat {hyp})", f"<(cat {ref})")):
    out = str(tmp_path / f"bleu{len(scores)}.json")
    subprocess.run(["bash", "-c", f"{bleu} --translation={translation} "
                    f"--reference={reference} --output_json={out}"], check=True,
                   capture_output=True, timeout=120)
    scores.append(json.load(open(out)))
  plain, piped = ({key: s[key]["score"] for key in ("bleu", "tokenized_bleu", "chrf")}
                  for s in scores)
  assert scores[1]["lines"] == scores[0]["lines"] == 2
  assert piped == plain and 0 < plain["bleu"] < 100
  # Parallel files are counted, then read: a pipe there is refused by name.
  proc = subprocess.run(["bash", "-c", f"{sys.executable} -c 'import sys; from t2tlite.data "
                         f"import parallel_text as p; list(p.read_parallel(sys.argv[1], "
                         f"sys.argv[2]))' <(cat {hyp}) {hyp}"],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0 and "not a regular file" in proc.stderr


class _NoOptions(Problem):
  """A problem with no options of its own (the base class's configure)."""
  name = "no_options"


def test_translate_files_option_errors(tmp_path):
  problem = registry.problem("translate_files")
  with pytest.raises(Exception, match="unknown key 'train_src'; did you mean train_source"):
    problem.configure("train_src=x")
  problem.configure("train_source=x.en")
  with pytest.raises(ProblemError, match="train_target is not set but train_source is"):
    problem.generate_data(str(tmp_path))
  with pytest.raises(ProblemError, match="takes no options"):
    _NoOptions().configure("vocab_size=3")
  with pytest.raises(Exception, match="--problem_options: unknown key 'vocab_size'"):
    registry.problem("algorithmic_reverse").configure("vocab_size=3")  # It takes seed, test_seed.


def test_datagen_cli_reports_bad_input_in_one_line(tmp_path):
  a = write(tmp_path / "a.en", "one\ntwo\n")
  b = write(tmp_path / "b.de", "eins\n")
  proc = subprocess.run(
      ["t2t-datagen", "--problem=translate_files", f"--data_dir={tmp_path}/data",
       f"--problem_options=train_source={a},train_target={b}"],
      capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1] == (
      f"t2t-datagen: error: {a} has 2 lines but {b} has 1; parallel files must align "
      "line by line")
  assert not [f for f in os.listdir(tmp_path / "data") if "tfrecord" in f]


def test_wmt_problems_under_tfds_mock_data(tmp_path, monkeypatch):
  """wmt_ende reads tfds wmt14_translate/de-en: train, validation (newstest2013), test."""
  import tensorflow_datasets as tfds

  asked = []
  real_load = tfds.load

  def recording_load(name, split, **kwargs):
    asked.append((name, split))
    return real_load(name, split=split, **kwargs)

  monkeypatch.setattr(tfds, "load", recording_load)
  with tfds.testing.mock_data(num_examples=200):
    problem = registry.problem("wmt_ende")
    problem.configure("vocab_size=300,num_train_shards=3")
    problem.generate_data(str(tmp_path), str(tmp_path / "tfds"))
    forward = list(problem.text_pairs("test", str(tmp_path / "tfds")))
    backward = registry.problem("wmt_deen")
    backward.configure("vocab_size=300,num_train_shards=3")
    reverse = list(backward.text_pairs("test", str(tmp_path / "tfds")))
  assert {split for name, split in asked} == {"train", "validation", "test"}
  assert {name for name, _ in asked} == {"wmt14_translate/de-en"}
  assert reverse == [(t, s) for s, t in forward] and len(forward) == 200
  assert len(problem.shard_paths(str(tmp_path), "train")) == 3
  assert sum(1 for _ in problem.dataset("train", str(tmp_path))) == 200
  assert backward.vocab_path(str(tmp_path)) == problem.vocab_path(str(tmp_path))
  encoder = problem.encoders(str(tmp_path))["inputs"]
  assert encoder.vocab_size == 300
  assert registry.problem("wmt_enfr").tfds_name == "wmt14_translate/fr-en"
  assert registry.problem("wmt_enfr").options.vocab_size == 32000
  assert registry.problem("wmt_ende").options.vocab_size == 37000


@needs_data
@pytest.mark.slow
def test_multi30k_commands_end_to_end(tmp_path):
  """t2t-datagen -> t2t-trainer -> t2t-decoder on Multi30k, as a user types them."""
  data, out = str(tmp_path / "data"), str(tmp_path / "run")
  run("t2t-datagen", "--problem=multi30k_ende", f"--data_dir={data}", f"--tmp_dir={MULTI30K}",
      "--problem_options=vocab_size=2000")
  train = run("t2t-trainer", "--problem=multi30k_ende", "--hparams_set=transformer_tiny",
              hparams_flag(**TINY_SHAPE, batch_size=1024, xla="false"),
              f"--data_dir={data}", f"--output_dir={out}", "--train_steps=30",
              "--eval_every=0", "--eval_steps=3", "--log_every=10",
              "--eval_decode_lines=10")
  assert "step 30/30" in train.stderr
  decode = run("t2t-decoder", "--problem=multi30k_ende", f"--data_dir={data}",
               f"--output_dir={out}", "--decode_split=test",
               f"--decode_to_file={tmp_path}/test.de", "--decode_hparams=beam_size=2")
  lines = plain_lines(f"{tmp_path}/test.de")
  assert len(lines) == 1000 and "bleu=" in decode.stdout
  encoder = subword.SubwordEncoder(f"{data}/vocab.multi30k_ende.2000.model")
  assert all(line == encoder.decode(encoder.encode(line)) for line in lines)  # Detokenized text.
