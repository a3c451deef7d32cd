"""English constituency parsing as translation (Section 6.3, Table 4 of the paper).

Source = the words of a Penn Treebank tree, target = the tree linearized as in
Vinyals & Kaiser et al. 2014 (`t2tlite.data.linearize`): traces and function
tags removed, POS tags normalised to XX (the option `target_words=true` writes
each word instead of its XX; see `ParsingOptions`). One shared sentencepiece vocabulary
(words and tree tokens), written by `t2t-datagen` like every translation
problem; datagen also writes `<problem>-{dev,test}.trees`, the gold trees as
EVALB lines, which `t2t-decoder` and the trainer's dev decoding score against.

Decoded output goes back through `linearize.delinearize` (tree repair, words
re-inserted; repairs counted and logged), so `t2t-decoder` writes trees that
`t2t-parse-eval` scores (`eval_metrics = ("parse_f1",)`: EVALB with
COLLINS.prm). Decoding defaults to the paper's beam 21, alpha 0.3, maximum
length input + 300.

- `wsj_parsing`: the WSJ part of the Penn Treebank (LDC99T42) in the LDC
  layout under `--tmp_dir`: `treebank_3/parsed/mrg/wsj/NN/*.mrg`, sections
  02-21 train, 22 dev, 23 test; 16K vocabulary (the paper's WSJ-only setting).
  The LDC licenses the treebank, so nothing is downloaded.
- `wsj_parsing_semisup`: the same with a 32K vocabulary (the paper's
  semi-supervised setting) and extra training trees named by the
  `extra_train` option (the paper used ~17M sentences of the high-confidence
  and BerkeleyParser corpora, which are not public; bring your own).
- `ptb_sample`: NLTK's free 10% sample (wsj_0001-wsj_0199, 3914 trees),
  `treebank.zip` or `wsj_0001-0199.combined.mrg.gz` in `--tmp_dir`, split by
  file: wsj_0001-0159 train (3396 trees), wsj_0160-0179 dev (273), wsj_0180-0199
  test (245).
"""

import dataclasses
import functools
import glob
import gzip
import os
import zipfile
from typing import Iterator, List, Optional, Tuple

from absl import logging

from t2tlite import files as files_lib
from t2tlite.data import linearize, parallel_text, subword, trees
from t2tlite.problems.problem import ProblemError
from t2tlite.problems.translate import TranslateOptions, TranslateProblem
from t2tlite.registry import PROBLEMS, register_problem


@dataclasses.dataclass(frozen=True)
class ParsingOptions(TranslateOptions):
  extra_train: str = ""  # Glob of extra training trees (.mrg-style bracketed files, plain or .gz), added to train.
  tree_symbols: bool = True  # Each `(LABEL`, `)LABEL` and `XX` of the training trees is one vocabulary piece (False: the learned pieces split them).
  # With XX per word the target shares nothing with the source, and a decoder that ignores
  # the source already predicts most tokens; written out, the words let it copy the word it is
  # at instead of counting XX to stay aligned.
  target_words: bool = False  # Each word in place of its `XX`, as the source's own pieces (False: the paper's `XX`).


class ParsingProblem(TranslateProblem):
  """Words -> linearized tree, from bracketed treebank files (`tree_files`)."""

  Options = ParsingOptions
  default_options = ParsingOptions(vocab_size=16000, vocab_type="bpe")
  eval_metrics = ("parse_f1",)
  # Section 6.3: "we increased the maximum output length to input length + 300 ... beam size
  # of 21 and alpha = 0.3".
  # constrain_trees: every output a well-formed tree over the source words (not in the paper,
  # which repairs nothing either; constrain_trees=false decodes unconstrained).
  # length_multiple=64: each batch width is an XLA compilation of a search that runs
  # input + 300 (then in four horizon loops, about 14 s on 2 cores), which the default multiple
  # of 8 paid for five widths on the sample's dev set; padding the sources costs the encoder
  # little. Same trees, 2.5 -> 3.3 sentences/s (bench/README.md,
  # "Parsing decode, second pass").
  # xla_opt_level=1: XLA's backend level 1 (its default is 3) compiles each width's search in
  # a fifth less time and runs it a tenth faster on a CPU; same trees, test 10.4-11.1 ->
  # 11.3-12.5 sentences/s (bench/README.md, "Parsing decode, ninth pass").
  default_decode_hparams = ("beam_size=21,alpha=0.3,extra_length=300,constrain_trees=true,"
                            "length_multiple=64,xla_opt_level=1")

  # --- To implement ---
  def tree_files(self, split: str, tmp_dir: Optional[str]) -> List[Tuple[str, bytes]]:
    """(name, contents) of the bracketed files of `split`, in order."""
    raise NotImplementedError

  # --- Derived ---
  def gold_trees(self, split: str, tmp_dir: Optional[str]) -> Iterator[trees.Tree]:
    """The treebank trees of `split`, as read (traces and function tags kept)."""
    files = self.tree_files(split, tmp_dir)
    if split == "train" and self.options.extra_train:
      files = files + _read_glob(self.options.extra_train, "--problem_options extra_train")
    for name, data in files:
      try:
        text = data.decode("utf-8")
      except UnicodeDecodeError as e:
        raise ProblemError(f"{name}: not UTF-8 text (byte {e.start})") from None
      yield from trees.read_trees(text, name)

  def parsed_pairs(self, split: str, tmp_dir: Optional[str]):
    """(source, target, gold EVALB line) per tree with words; trees of traces only are skipped."""
    skipped = 0
    for tree in self.gold_trees(split, tmp_dir):
      pair = linearize.gold_pair(tree, self.options.target_words)
      if pair is None:
        skipped += 1
        continue
      yield pair[0], pair[1], trees.evalb_line(tree)
    if skipped:
      logging.info("%s %s: skipped %d trees without words", self.name, split, skipped)

  def source_target_pairs(self, split: str, tmp_dir: Optional[str]) -> Iterator[Tuple[str, str]]:
    try:
      for source, target, _ in self.parsed_pairs(split, tmp_dir):
        yield source, target
    except trees.TreeError as e:
      raise ProblemError(str(e)) from None

  def vocab_symbols(self, tmp_dir: Optional[str]) -> List[str]:
    """Every tree token of the training targets as one whole piece (`tree_symbols`).

    Tree tokens are the brackets, and `XX` unless the targets write words
    (`target_words`), whose pieces stay those the source is cut into.
    Learned BPE splits `(NP` into `▁(` + `NP`, so a tree takes about twice the
    steps and a label must be re-learned at each closing bracket; as
    user-defined symbols of the one shared vocabulary (tied embeddings kept)
    each bracket is one step and the tree constraint
    (`t2tlite.decoding.tree_constraint`) works on whole symbols.
    """
    if not self.options.tree_symbols:
      return []
    tokens = set()
    for _, target in self.source_target_pairs("train", tmp_dir):
      tokens.update(t for t in target.split() if linearize.is_open(t) or linearize.is_close(t)
                    or (t == linearize.POS_TOKEN and not self.options.target_words))
    return [subword.WORD_BOUNDARY + t for t in sorted(tokens)]

  def trees_path(self, data_dir: str, split: str) -> str:
    """The gold trees of a dev/test split, one EVALB line each, aligned with .inputs."""
    return os.path.join(data_dir, f"{self.name}-{split}.trees")

  def generate_data(self, data_dir: str, tmp_dir: Optional[str] = None) -> None:
    super().generate_data(data_dir, tmp_dir)
    for split in ("dev", "test"):
      path = self.trees_path(data_dir, split)
      if os.path.exists(path):
        continue
      with files_lib.atomic_write(path) as f:
        for _, _, gold in self.parsed_pairs(split, tmp_dir):
          f.write(gold + "\n")

  def eval_text(self, split: str, data_dir: Optional[str]) -> Tuple[List[str], List[str]]:
    """(source words, gold trees): decodes are scored as trees, not as linearized text."""
    sources, _ = super().eval_text(split, data_dir)
    path = self.trees_path(data_dir, split)
    if not os.path.exists(path):
      raise ProblemError(f"{path}: no gold trees for {self.name} {split}; run t2t-datagen "
                         f"--problem={self.name} --data_dir={data_dir} again")
    gold = list(parallel_text.read_lines(path))
    if len(gold) != len(sources):
      raise ProblemError(f"{path} has {len(gold)} trees but {split} has {len(sources)} sources")
    return sources, gold

  def decode_constraint(self, decode_hparams, encoders):
    """The tree constraint (`constrain_trees`, on by default) over the shared vocabulary.

    With `target_words` its word slots take the source's own pieces, in order.
    """
    from t2tlite.data.text_encoder import EOS_ID
    from t2tlite.decoding import tree_constraint
    if not decode_hparams.constrain_trees:
      return None
    try:
      return tree_constraint.make_tree_constraint(decode_hparams, encoders["inputs"],
                                                  encoders["targets"], EOS_ID,
                                                  target_words=self.options.target_words)
    except ValueError as e:
      raise ProblemError(f"--decode_hparams constrain_trees=true: {e}") from None

  def decode_postprocessor(self, decode_hparams) -> linearize.TreeRepairer:
    """Decoded target -> repaired tree over the source words (repairs counted)."""
    return linearize.TreeRepairer(self.options.target_words,
                                  decode_hparams.tree_collapse_unary_repeat)


def _read_glob(pattern: str, what: str) -> List[Tuple[str, bytes]]:
  paths = sorted(glob.glob(pattern))
  if not paths:
    raise ProblemError(f"{what}: no file matches {pattern}")
  out = []
  for path in paths:
    with open(path, "rb") as f:
      data = f.read()
    out.append((path, gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data))
  return out


# --- The Penn Treebank (LDC99T42), WSJ sections ---
WSJ_SECTIONS = {"train": [f"{s:02d}" for s in range(2, 22)], "dev": ["22"], "test": ["23"]}
WSJ_LAYOUT = os.path.join("treebank_3", "parsed", "mrg", "wsj")


@register_problem("wsj_parsing")
class WsjParsing(ParsingProblem):
  """WSJ sections 02-21 / 22 / 23 of the Penn Treebank, read from the LDC layout in --tmp_dir."""

  def wsj_dir(self, tmp_dir: Optional[str]) -> str:
    where = os.path.join(tmp_dir or "--tmp_dir", WSJ_LAYOUT)
    if not tmp_dir or not os.path.isdir(where):
      raise ProblemError(
          f"{where}: no Penn Treebank here. It is licensed by the LDC (LDC99T42, Treebank-3) "
          f"and cannot be downloaded: put its treebank_3/ folder in --tmp_dir, or use "
          f"--problem=ptb_sample (NLTK's free 10% sample)")
    return where

  def tree_files(self, split: str, tmp_dir: Optional[str]) -> List[Tuple[str, bytes]]:
    root = self.wsj_dir(tmp_dir)
    out = []
    for section in WSJ_SECTIONS[split]:
      paths = sorted(glob.glob(os.path.join(root, section, "*.mrg")))
      if not paths:
        raise ProblemError(f"{os.path.join(root, section)}: no .mrg files (WSJ section "
                           f"{section} is part of {split})")
      for path in paths:
        with open(path, "rb") as f:
          out.append((path, f.read()))
    return out


@register_problem("wsj_parsing_semisup")
class WsjParsingSemisup(WsjParsing):
  """WSJ plus extra trees (`extra_train=GLOB`), 32K vocabulary: the paper's semi-supervised row."""

  default_options = ParsingOptions(vocab_size=32000, vocab_type="bpe")

  def tree_files(self, split, tmp_dir):
    if split == "train" and not self.options.extra_train:
      raise ProblemError("--problem_options: wsj_parsing_semisup needs extra_train=GLOB "
                         "(the extra parsed trees to train on)")
    return super().tree_files(split, tmp_dir)


# tensor2tensor's names for WSJ parsing (its wsj_parsing.py): the same task and splits, with
# 2**13 or 2**14 subwords of its own tokenizer.
PROBLEMS.alias("parsing_english_ptb16k", "wsj_parsing",
               "tensor2tensor's name; t2t uses 16384 subwords, this problem the paper's 16000 "
               "BPE tokens")
PROBLEMS.alias("parsing_english_ptb8k", "wsj_parsing",
               "tensor2tensor's 8192-subword WSJ parsing; this problem has 16000 BPE tokens "
               "(the paper's WSJ-only size) unless --problem_options=vocab_size=8192")


# --- NLTK's Penn Treebank sample ---
SAMPLE_ZIP = "treebank.zip"
SAMPLE_MRG = "wsj_0001-0199.combined.mrg.gz"
SAMPLE_FILES = {"train": (1, 159), "dev": (160, 179), "test": (180, 199)}  # wsj_NNNN, inclusive.
# Where wsj_0160 and wsj_0180 start in SAMPLE_MRG (its files concatenated in order): trees
# before them. tests/test_parsing.py checks these against the files in treebank.zip.
SAMPLE_MRG_OFFSETS = {"train": (0, 3396), "dev": (3396, 3669), "test": (3669, 3914)}


@register_problem("ptb_sample")
class PtbSample(ParsingProblem):
  """NLTK's 10% WSJ sample, split by file (train wsj_0001-0159, dev 0160-0179, test 0180-0199).

  Its ~3400 training sentences support far fewer pieces than the paper's 16K;
  4000 is the default.
  """

  default_options = ParsingOptions(vocab_size=4000, vocab_type="bpe")

  def sample_path(self, tmp_dir: Optional[str]) -> str:
    for name in (SAMPLE_ZIP, SAMPLE_MRG):
      path = os.path.join(tmp_dir or "", name)
      if tmp_dir and os.path.exists(path):
        return path
    raise ProblemError(
        f"{tmp_dir or '--tmp_dir'}: neither {SAMPLE_ZIP} (NLTK's Penn Treebank sample, "
        f"nltk_data packages/corpora) nor {SAMPLE_MRG} is there; pass --tmp_dir=DIR holding one "
        f"(this project's copy: ../shared/data/ptb)")

  def tree_files(self, split: str, tmp_dir: Optional[str]) -> List[Tuple[str, bytes]]:
    path = self.sample_path(tmp_dir)
    if path.endswith(".zip"):
      first, last = SAMPLE_FILES[split]
      try:
        with zipfile.ZipFile(path) as archive:
          return [(f"{path}:{name}", archive.read(name)) for name in
                  (f"treebank/combined/wsj_{n:04d}.mrg" for n in range(first, last + 1))]
      except (zipfile.BadZipFile, KeyError) as e:
        raise ProblemError(f"{path}: not NLTK's treebank.zip ({e})") from None
    return [(path, _split_of_combined(path, split))]


def _split_of_combined(path: str, split: str) -> bytes:
  """The trees of `split` from SAMPLE_MRG, cut at the tree offsets of the split's files."""
  all_trees = _combined_trees(path)
  if len(all_trees) != SAMPLE_MRG_OFFSETS["test"][1]:
    raise ProblemError(f"{path}: {len(all_trees)} trees, not the sample's "
                       f"{SAMPLE_MRG_OFFSETS['test'][1]}")
  first, last = SAMPLE_MRG_OFFSETS[split]
  return "\n".join(t.to_string() for t in all_trees[first:last]).encode("utf-8")


@functools.lru_cache(maxsize=1)
def _combined_trees(path: str) -> List[trees.Tree]:
  """All trees of SAMPLE_MRG, read once for the three splits."""
  with gzip.open(path, "rb") as f:
    return list(trees.read_trees(f.read().decode("utf-8"), path))
