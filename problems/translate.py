"""Translation problems: parallel text -> one shared subword vocabulary -> sharded TFRecords.

A `TranslateProblem` says where its (source, target) pairs come from
(`source_target_pairs`); this module does the rest of what `t2t-datagen`
promises: learn the shared source/target vocabulary with sentencepiece (or
reuse the one already in `data_dir`, never replacing it silently), tokenize
on all cores while writing, and write each split as TFRecord
shards plus, for dev and test, the raw text that `t2t-decoder` reads.

Every file of a split is written under a temporary name and renamed only when
the whole split is done, so a run killed with `kill -9` leaves nothing a later
run trusts, and a finished split is skipped by the next run. A split's
`.stats.json` records what was read and dropped and the length histogram, so
the trainer can say how many pairs its `max_length` filter drops.

Options (`--problem_options="vocab_size=16000,num_train_shards=4"`) are a typed
dataclass like the hparams; a reversed direction (`wmt_deen`) is one subclass
line with `reverse = True` and shares the forward problem's vocabulary.
"""

import collections
import concurrent.futures
import dataclasses
import json
import os
from typing import Dict, Iterator, List, Optional, Tuple

import tensorflow as tf
from absl import logging

from t2tlite import files as files_lib
from t2tlite import overrides
from t2tlite.data import parallel_text, records, shard_manifest, subword
from t2tlite.progress import Progress
from t2tlite.problems import problem as problem_lib
from t2tlite.problems.problem import Problem, ProblemError

_CHUNK = 8192  # Pairs per tokenization call.


@dataclasses.dataclass(frozen=True)
class TranslateOptions:
  vocab_size: int = 8000  # Pieces in the shared source/target vocabulary.
  vocab_type: str = "bpe"  # "bpe" (the paper's EN-DE) or "unigram" (sentencepiece's nearest to word pieces).
  vocab_sample_size: int = 1_000_000  # Sentences (both sides) sampled from train to learn the vocabulary.
  num_train_shards: int = 1  # TFRecord files the train split is spread over (round robin).
  # Lowercase both sides, inside the vocabulary (subword.train_vocabulary): the model reads
  # and writes lowercase, and dev/test references are compared lowercased. Off: text is kept
  # cased, as the paper's WMT data. On is how Multi30k's published systems are trained (the
  # task's lowercased files), for its lowercased BLEU.
  lowercase: bool = False
  # BPE-dropout (Provilkov et al., 2020; not in the paper): the train split's segmentation
  # skips each BPE merge with this probability, so the model sees many segmentations of a
  # word; dev and test keep the deterministic one. 0 (the paper): off. Provilkov et al. use 0.1.
  subword_dropout: float = 0.0
  # With subword_dropout: the train split is written this many times, each copy segmented
  # anew (seeded), so epochs see different segmentations, as Provilkov et al.'s per-batch
  # dropout does, from records written once.
  subword_samples: int = 1


class TranslateProblem(Problem):
  """Base class of translation problems with a shared sentencepiece vocabulary."""

  Options = TranslateOptions
  default_options = TranslateOptions()
  eval_metrics = ("bleu",)
  reverse = False  # True: the target->source direction of the same data.
  vocab_name: Optional[str] = None  # Shared by both directions; default: the problem name.

  def __init__(self):
    self.options = self.default_options

  def configure(self, options: str, flag: str = "--problem_options") -> None:
    """Applies "key=value,..." to this problem's typed options."""
    self.options = overrides.apply_overrides(self.options, options, flag)
    if self.options.vocab_type not in subword.VOCAB_TYPES:
      raise overrides.OverrideError(f"{flag}: vocab_type={self.options.vocab_type!r} must be "
                                    f"one of {', '.join(subword.VOCAB_TYPES)}")
    dropout, samples = self.options.subword_dropout, self.options.subword_samples
    if not 0.0 <= dropout < 1.0:
      raise overrides.OverrideError(f"{flag}: subword_dropout={dropout} must be in [0, 1)")
    if dropout and self.options.vocab_type != "bpe":
      raise overrides.OverrideError(f"{flag}: subword_dropout needs vocab_type=bpe (it drops "
                                    f"BPE merges), not {self.options.vocab_type!r}")
    if samples < 1 or (samples > 1 and not dropout):
      raise overrides.OverrideError(f"{flag}: subword_samples={samples} must be 1, or more "
                                    "with subword_dropout > 0 (else the copies are identical)")

  # --- To implement ---
  def source_target_pairs(self, split: str, tmp_dir: Optional[str]) -> Iterator[Tuple[str, str]]:
    """(source, target) lines of `split` in the forward direction."""
    raise NotImplementedError

  def split_size_hint(self, split: str, tmp_dir: Optional[str]) -> Optional[int]:
    """Pairs in `split` if cheaply known (for the progress ETA)."""
    return None

  # --- Derived ---
  def text_pairs(self, split: str, tmp_dir: Optional[str] = None) -> Iterator[Tuple[str, str]]:
    for source, target in self.source_target_pairs(split, tmp_dir):
      yield (target, source) if self.reverse else (source, target)

  def vocab_path(self, data_dir: str) -> str:
    name = self.vocab_name or self.name
    return os.path.join(data_dir, f"vocab.{name}.{self.options.vocab_size}.model")

  def options_path(self, data_dir: str) -> str:
    return os.path.join(data_dir, f"{self.name}.options.json")

  def use_saved_options(self, data_dir: Optional[str]) -> None:
    """Adopts the options t2t-datagen wrote into data_dir (vocab size, shards, files)."""
    path = self.options_path(data_dir) if data_dir else None
    if path and os.path.exists(path):
      with open(path) as f:
        self.options = overrides.from_dict(self.Options, self._with_defaults(json.load(f)), path)

  def _with_defaults(self, saved: dict) -> dict:
    """Saved options, with options added since they were written at this problem's defaults.

    Every option defaults to the behaviour that came before it, so a data_dir
    written before an option existed was written with its default.
    """
    defaults = dataclasses.asdict(self.default_options)
    return {**{k: v for k, v in defaults.items() if k not in saved}, **saved}

  def _save_options(self, data_dir: str) -> None:
    """Records the options; a data_dir made with other options is refused, naming them."""
    path = self.options_path(data_dir)
    mine = dataclasses.asdict(self.options)
    if os.path.exists(path):
      with open(path) as f:
        saved = self._with_defaults(json.load(f))
      differ = sorted(k for k in set(mine) | set(saved) if mine.get(k) != saved.get(k))
      if differ:
        raise ProblemError(f"{path}: {data_dir} was generated with other options ("
                           + ", ".join(f"{k}={saved.get(k)!r} not {mine.get(k)!r}"
                                       for k in differ)
                           + "); use another --data_dir or the same --problem_options")
      return
    with files_lib.atomic_write(path) as f:
      json.dump(mine, f, indent=1, sort_keys=True)

  def has_split(self, split: str) -> bool:
    """Whether this problem has pairs for `split` at all (translate_files: dev/test optional)."""
    return True

  def has_data(self, split: str, data_dir: Optional[str]) -> bool:
    self.use_saved_options(data_dir)
    return bool(data_dir) and all(os.path.exists(p) for p in self.shard_paths(data_dir, split))

  def encoders(self, data_dir: Optional[str] = None) -> Dict[str, subword.SubwordEncoder]:
    if not data_dir:
      raise ProblemError(f"problem {self.name} needs --data_dir (its vocabulary lives there)")
    self.use_saved_options(data_dir)
    path = self.vocab_path(data_dir)
    if not os.path.exists(path):
      raise ProblemError(f"{path}: no vocabulary; run t2t-datagen --problem={self.name} "
                         f"--data_dir={data_dir} first")
    encoder = subword.SubwordEncoder(path)
    return {"inputs": encoder, "targets": encoder}

  def shard_paths(self, data_dir: str, split: str) -> List[str]:
    n = self.options.num_train_shards if split == "train" else 1
    return [os.path.join(data_dir, f"{self.name}-{split}-{i:05d}-of-{n:05d}.tfrecord")
            for i in range(n)]

  def stats_path(self, data_dir: str, split: str) -> str:
    return os.path.join(data_dir, f"{self.name}-{split}.stats.json")

  def split_stats(self, data_dir: str, split: str) -> Optional[dict]:
    path = self.stats_path(data_dir, split)
    if not os.path.exists(path):
      return None
    with open(path) as f:
      return json.load(f)

  def count_longer_than(self, data_dir: Optional[str], split: str, max_length: int) -> Optional[int]:
    """Pairs of `split` with a side longer than max_length tokens (EOS included)."""
    self.use_saved_options(data_dir)
    stats = self.split_stats(data_dir, split) if data_dir else None
    if stats is None or not max_length:
      return None
    return sum(c for length, c in stats["length_histogram"].items() if int(length) > max_length)

  def vocab_symbols(self, tmp_dir: Optional[str]) -> List[str]:
    """Pieces the vocabulary must hold whole (sentencepiece user-defined symbols); none here."""
    return []

  def generate_data(self, data_dir: str, tmp_dir: Optional[str] = None) -> None:
    os.makedirs(data_dir, exist_ok=True)
    self._save_options(data_dir)
    encoder = subword.load_or_train(
        self.vocab_path(data_dir), self.options.vocab_size,
        lambda: (line for pair in self.source_target_pairs("train", tmp_dir) for line in pair),
        self.options.vocab_type, self.options.vocab_sample_size,
        user_defined_symbols_fn=lambda: self.vocab_symbols(tmp_dir),
        lowercase=self.options.lowercase)
    for split in problem_lib.SPLITS:
      if self.has_split(split):
        self._write_split(split, data_dir, tmp_dir, encoder)
      else:
        logging.info("%s %s: no files given, skipped", self.name, split)

  def _split_files(self, data_dir: str, split: str) -> List[str]:
    texts = ([self.text_path(data_dir, split, side) for side in ("inputs", "targets")]
             if split != "train" else [])
    return self.shard_paths(data_dir, split) + texts + [self.stats_path(data_dir, split)]

  def _write_split(self, split, data_dir, tmp_dir, encoder):
    files = self._split_files(data_dir, split)
    if all(os.path.exists(p) for p in files) and not shard_manifest.stale_split(
        self, data_dir, split):
      logging.info("%s %s: already written and verified, skipped", self.name, split)
      return
    n_shards = len(self.shard_paths(data_dir, split))
    stats = parallel_text.LineStats()
    dropout = self.options.subword_dropout if split == "train" else 0.0
    copies = self.options.subword_samples if dropout else 1
    hint = self.split_size_hint(split, tmp_dir)
    progress = Progress(f"{self.name} {split}", hint and hint * copies, "pairs")
    with records.SplitWriter(files[:n_shards], files[n_shards:-1], files[-1]) as writer:
      pairs = (pair for _ in range(copies)
               for pair in parallel_text.drop_empty(self.text_pairs(split, tmp_dir), stats))
      for sources, targets, source_ids, target_ids in tokenize_pairs(
          pairs, encoder, subword_dropout=dropout):
        for k in range(len(sources)):
          writer.write(sources[k], targets[k], source_ids[k], target_ids[k])
        progress.update(writer.count)
      if writer.count == 0:
        raise ProblemError(f"{self.name} {split}: no pairs (read {stats.read}, {stats.empty} "
                           "with an empty side)")
      writer.pairs_read, writer.dropped_empty_side = stats.read, stats.empty
    shard_manifest.record_split(self, data_dir, split)
    progress.finish(writer.count)
    if stats.empty:
      logging.info("%s %s: dropped %d of %d pairs with an empty side", self.name, split,
                   stats.empty, stats.read)

  def dataset(self, split: str, data_dir: Optional[str] = None) -> tf.data.Dataset:
    if not data_dir:
      raise ProblemError(f"problem {self.name} needs --data_dir (run t2t-datagen first)")
    self.use_saved_options(data_dir)
    files = self.shard_paths(data_dir, split)
    if not all(os.path.exists(p) for p in files):
      raise ProblemError(f"{files[0]}: no complete data for {self.name} {split}; run "
                         f"t2t-datagen --problem={self.name} --data_dir={data_dir} first")
    shard_manifest.check_split_on_open(self, data_dir, split)  # Sizes: cheap.
    return records.read_records(files)

  def eval_text(self, split: str, data_dir: Optional[str]) -> Tuple[List[str], List[str]]:
    """The dev/test text datagen wrote, for t2t-decoder --decode_split.

    With `lowercase` the references come lowercased, as the model writes them,
    so every score against them (the trainer's dev BLEU, t2t-decoder's) is a
    lowercased one. The sources stay as written: the vocabulary lowercases them.
    """
    paths = [self.text_path(data_dir or "", split, side) for side in ("inputs", "targets")]
    if not data_dir or not all(os.path.exists(p) for p in paths):
      raise ProblemError(f"{paths[0]}: no {split} text for {self.name}; run t2t-datagen first")
    self.use_saved_options(data_dir)
    sources, references = (list(parallel_text.read_lines(p)) for p in paths)
    if self.options.lowercase:
      references = [line.lower() for line in references]
    return sources, references


def tokenize_pairs(pairs, encoder: subword.SubwordEncoder, chunk: int = _CHUNK,
                   in_graph: bool = False, subword_dropout: float = 0.0):
  """Yields (sources, targets, source_ids, target_ids) per chunk of pairs.

  By default sentencepiece's C++ batch encoder (all cores) tokenizes the next
  chunk in a background thread while this one writes records: on Multi30k it
  is ~2x faster than the tensorflow_text graph op (bench/datagen_throughput.py)
  and gives the same ids from the same model file (tests/test_translate.py).
  `in_graph=True` tokenizes with tensorflow_text instead.

  `subword_dropout` > 0 samples each segmentation with that BPE-dropout
  (`subword.sampled_encoder`: seeded per call, so a rerun writes the same ids).
  """
  if subword_dropout:
    if in_graph:
      raise ValueError("subword_dropout samples with sentencepiece's encoder, not in-graph")
    encode = subword.sampled_encoder(encoder, subword_dropout)
  else:
    encode = _in_graph_encoder(encoder) if in_graph else (
        lambda lines: encoder.processor.encode(lines, num_threads=os.cpu_count() or 1))

  def chunks():
    sources, targets = [], []
    for source, target in pairs:
      sources.append(source)
      targets.append(target)
      if len(sources) == chunk:
        yield sources, targets
        sources, targets = [], []
    if sources:
      yield sources, targets

  def tokenized(sources_targets):
    sources, targets = sources_targets
    return sources, targets, encode(sources), encode(targets)

  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    pending = collections.deque()
    for item in chunks():
      pending.append(pool.submit(tokenized, item))
      if len(pending) > 2:
        yield pending.popleft().result()
    while pending:
      yield pending.popleft().result()


def _in_graph_encoder(encoder: subword.SubwordEncoder):
  """lines -> id lists through the tensorflow_text op, compiled once."""
  tokenizer = encoder.tokenizer

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def tokenize(lines):
    ragged = tokenizer.tokenize(lines)
    return ragged.flat_values, ragged.row_splits

  def encode(lines):
    flat, splits = tokenize(tf.constant(lines))
    flat, splits = flat.numpy().tolist(), splits.numpy().tolist()
    return [flat[a:b] for a, b in zip(splits[:-1], splits[1:])]
  return encode
