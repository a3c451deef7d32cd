"""Parsing problems: the PTB sample's split, the LDC layout, datagen's gold trees, decoding defaults."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from t2tlite import registry
from t2tlite.data import linearize, trees
from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.problems.problem import ProblemError
from tests.helpers import TINY_SHAPE, hparams_flag


def ptb_dir(shared_dir):
  return os.path.join(shared_dir, "data", "ptb")


def trees_per_file(shared_dir):
  """{n: trees in treebank/combined/wsj_000n.mrg}, read straight from the zip."""
  with zipfile.ZipFile(os.path.join(ptb_dir(shared_dir), "treebank.zip")) as archive:
    return {n: len(list(trees.read_trees(archive.read(f"treebank/combined/wsj_{n:04d}.mrg")
                                         .decode()))) for n in range(1, 200)}


def test_sample_split_by_file_from_zip_and_from_the_combined_mrg(shared_dir, tmp_path):
  counts = trees_per_file(shared_dir)
  problem = registry.problem("ptb_sample")
  from_zip = {s: list(problem.source_target_pairs(s, ptb_dir(shared_dir)))
              for s in ("train", "dev", "test")}
  assert {s: len(p) for s, p in from_zip.items()} == {
      "train": sum(counts[n] for n in range(1, 160)),
      "dev": sum(counts[n] for n in range(160, 180)),
      "test": sum(counts[n] for n in range(180, 200))} == {"train": 3396, "dev": 273, "test": 245}
  # The concatenated .mrg.gz alone (no zip beside it) gives the very same pairs.
  shutil.copy(os.path.join(ptb_dir(shared_dir), "wsj_0001-0199.combined.mrg.gz"), tmp_path)
  for split, pairs in from_zip.items():
    assert list(problem.source_target_pairs(split, str(tmp_path))) == pairs
  with zipfile.ZipFile(os.path.join(ptb_dir(shared_dir), "treebank.zip")) as archive:
    first_dev = next(trees.read_trees(archive.read("treebank/combined/wsj_0160.mrg").decode()))
  assert from_zip["dev"][0][0] == " ".join(w for t, w in first_dev.tagged_words() if t != "-NONE-")


def test_missing_data_is_a_clear_error(tmp_path):
  with pytest.raises(ProblemError, match="neither treebank.zip"):
    list(registry.problem("ptb_sample").source_target_pairs("train", str(tmp_path)))
  with pytest.raises(ProblemError, match=r"licensed by the LDC \(LDC99T42"):
    list(registry.problem("wsj_parsing").source_target_pairs("train", str(tmp_path)))
  with pytest.raises(ProblemError, match="treebank_3/parsed/mrg/wsj"):
    list(registry.problem("wsj_parsing").source_target_pairs("dev", None))


def ldc_layout(shared_dir, root):
  """A treebank_3/ tree with two real sample files in each of sections 02-23."""
  with zipfile.ZipFile(os.path.join(ptb_dir(shared_dir), "treebank.zip")) as archive:
    for section in range(2, 24):
      folder = os.path.join(root, "treebank_3", "parsed", "mrg", "wsj", f"{section:02d}")
      os.makedirs(folder)
      for n in (2 * section, 2 * section + 1):
        with open(os.path.join(folder, f"wsj_{section:02d}{n:02d}.mrg"), "wb") as f:
          f.write(archive.read(f"treebank/combined/wsj_{n:04d}.mrg"))


def test_wsj_parsing_reads_sections_from_the_ldc_layout(shared_dir, tmp_path):
  ldc_layout(shared_dir, tmp_path)
  counts = trees_per_file(shared_dir)
  problem = registry.problem("wsj_parsing")
  assert problem.options.vocab_size == 16000  # The paper's WSJ-only vocabulary.
  sizes = {s: len(list(problem.source_target_pairs(s, str(tmp_path))))
           for s in ("train", "dev", "test")}
  assert sizes == {"train": sum(counts[n] for s in range(2, 22) for n in (2 * s, 2 * s + 1)),
                   "dev": counts[44] + counts[45], "test": counts[46] + counts[47]}
  os.remove(os.path.join(tmp_path, "treebank_3/parsed/mrg/wsj/23/wsj_2346.mrg"))
  os.remove(os.path.join(tmp_path, "treebank_3/parsed/mrg/wsj/23/wsj_2347.mrg"))
  with pytest.raises(ProblemError, match="no .mrg files .WSJ section 23 is part of test"):
    list(problem.source_target_pairs("test", str(tmp_path)))


def test_semisupervised_adds_extra_trees_and_a_32k_vocabulary(shared_dir, tmp_path):
  ldc_layout(shared_dir, tmp_path)
  problem = registry.problem("wsj_parsing_semisup")
  assert problem.options.vocab_size == 32000
  with pytest.raises(ProblemError, match="needs extra_train=GLOB"):
    list(problem.source_target_pairs("train", str(tmp_path)))
  extra = tmp_path / "extra.trees"
  extra.write_text("(TOP (S (NP (PRP It)) (VP (VBZ works)) (. .)))\n")
  problem.configure(f"extra_train={tmp_path}/extra*")
  pairs = list(problem.source_target_pairs("train", str(tmp_path)))
  assert pairs[-1] == ("It works .", "(S (NP XX )NP (VP XX )VP XX )S")
  assert len(list(problem.source_target_pairs("dev", str(tmp_path)))) == len(list(
      registry.problem("wsj_parsing").source_target_pairs("dev", str(tmp_path))))


def test_parsing_decodes_with_the_papers_settings():
  problem = registry.problem("ptb_sample")
  hp = DecodeHParams().override(problem.default_decode_hparams)
  assert (hp.beam_size, hp.alpha, hp.extra_length) == (21, 0.3, 300)
  assert problem.eval_metrics == ("parse_f1",)
  tiny = registry.hparams("transformer_parsing_tiny")
  assert (tiny.num_encoder_layers, tiny.num_decoder_layers) == (4, 4)
  assert tiny.dropout == registry.hparams("transformer_base").dropout == 0.1  # The paper's P_drop.
  shallow = registry.hparams("transformer_parsing_tiny_shallow")  # The recipe's: one decoder layer.
  assert shallow == tiny.replace(num_decoder_layers=1)


def test_datagen_writes_gold_trees_aligned_with_the_sources(shared_dir, tmp_path):
  problem = registry.problem("ptb_sample")
  problem.generate_data(str(tmp_path), ptb_dir(shared_dir))
  sources, gold = problem.eval_text("test", str(tmp_path))
  assert len(sources) == len(gold) == 245
  for source, line in zip(sources, gold):
    tree = trees.read_tree(line)
    assert tree.label == "TOP"
    assert source.split() == [w for t, w in tree.tagged_words() if t != "-NONE-"]
  targets = open(problem.text_path(str(tmp_path), "test", "targets")).read().splitlines()
  assert targets[0] == linearize.gold_pair(trees.read_tree(gold[0]))[1]
  encoder = problem.encoders(str(tmp_path))["targets"]
  assert encoder.vocab_size == 4000
  assert encoder.decode(encoder.encode(targets[0])) == targets[0]
  repairer = problem.decode_postprocessor(DecodeHParams())
  assert repairer(sources[0], targets[0]) == linearize.delinearize(
      targets[0], sources[0].split()).to_string()


def test_datagen_train_decode_parse_eval(shared_dir, tmp_path):
  """The recipe's commands end to end on a 2-layer d_model=32 model: decodes are scored trees."""
  data, out = tmp_path / "data", tmp_path / "train"
  env = dict(os.environ)

  def run(module, *args):
    return subprocess.run([sys.executable, "-m", f"t2tlite.bin.{module}", *args], env=env,
                          capture_output=True, text=True, check=True)

  run("t2t_datagen", "--problem=ptb_sample", f"--data_dir={data}", f"--tmp_dir={ptb_dir(shared_dir)}")
  run("t2t_trainer", "--problem=ptb_sample", "--hparams_set=transformer_parsing_tiny",
      hparams_flag(xla="false", num_encoder_layers=2, num_decoder_layers=2, **TINY_SHAPE),
      f"--data_dir={data}", f"--output_dir={out}", "--train_steps=20", "--eval_every=0",
      "--noeval_decode")
  sources = (data / "ptb_sample-dev.inputs").read_text().splitlines()[:3]
  (tmp_path / "in").write_text("\n".join(sources) + "\n")
  gold = (data / "ptb_sample-dev.trees").read_text().splitlines()[:3]
  (tmp_path / "gold").write_text("\n".join(gold) + "\n")
  proc = run("t2t_decoder", "--problem=ptb_sample", f"--data_dir={data}", f"--output_dir={out}",
             f"--decode_from_file={tmp_path / 'in'}", f"--decode_reference={tmp_path / 'gold'}",
             f"--decode_to_file={tmp_path / 'out'}", "--decode_hparams=beam_size=2,extra_length=20")
  assert "decoded trees repaired" in proc.stderr
  assert "xla for compiling: backend optimization level 1" in proc.stderr  # Parsing's default.
  decoded = (tmp_path / "out").read_text().splitlines()
  assert [trees.read_tree(d).words() for d in decoded] == [s.split() for s in sources]
  scores = json.loads((tmp_path / "out.scores.json").read_text())
  assert 0 <= scores["parse_f1"] <= 100 and scores["parse_errors"] == 0
  proc = run("t2t_parse_eval", f"--gold={tmp_path / 'gold'}", f"--test={tmp_path / 'out'}")
  assert f"Bracketing FMeasure       = {scores['parse_f1']:6.2f}" in proc.stdout.splitlines()


@pytest.fixture(scope="module")
def sample_data(tmp_path_factory):
  """ptb_sample's data written once for the tests below (whole tree symbols, the default)."""
  from tests.helpers import SHARED
  if not os.path.isdir(SHARED):
    pytest.skip("../shared not found")
  data = tmp_path_factory.mktemp("ptb_data")
  registry.problem("ptb_sample").generate_data(str(data), ptb_dir(SHARED))
  return str(data)


def test_tree_tokens_are_whole_pieces_of_the_shared_vocabulary(sample_data):
  from tests.helpers import SHARED
  problem = registry.problem("ptb_sample")
  encoder = problem.encoders(sample_data)["targets"]
  targets = open(problem.text_path(sample_data, "dev", "targets")).read().splitlines()
  symbols = set(problem.vocab_symbols(ptb_dir(SHARED)))  # Every tree token of train.
  whole = total = 0
  for target in targets:
    for token in target.split():
      pieces = encoder.encode(token)
      total += 1
      if "\u2581" + token in symbols:
        whole += 1
        assert len(pieces) == 1 and encoder.decode(pieces) == token
    assert encoder.decode(encoder.encode(target)) == target
  assert whole / total > 0.999  # A few dev labels never occur in train (WHADJP).


def test_constrained_decoding_needs_no_repair_even_from_an_untrained_model(sample_data):
  """An untrained model's beams are trees over exactly the source words, greedy and beam."""
  from t2tlite.decoding.decoder import Decoder
  from t2tlite.models.transformer import Transformer
  from tests.helpers import tiny_hparams
  problem = registry.problem("ptb_sample")
  encoders = problem.encoders(sample_data)
  vocab = encoders["targets"].vocab_size
  model = Transformer(tiny_hparams(xla=False, input_vocab_size=vocab, target_vocab_size=vocab))
  sources, _ = problem.eval_text("dev", sample_data)
  sources = sorted(sources, key=len)[:6]
  for beam in (1, 3):
    hp = DecodeHParams().override(problem.default_decode_hparams).override(
        f"beam_size={beam},extra_length=60,return_beams=true")
    assert hp.constrain_trees
    decoder = Decoder(model, hp, problem.decode_constraint(hp, encoders))
    repairer = problem.decode_postprocessor(hp)
    nbest = decoder.decode_nbest([encoders["inputs"].encode(s) for s in sources])
    for source, beams in zip(sources, nbest):
      for target in (encoders["targets"].decode(ids) for ids, _ in beams):
        tokens = target.split()
        assert tokens.count(linearize.POS_TOKEN) == len(source.split())
        tree = linearize.delinearize(target, source.split(), linearize.Repairs())
        assert trees.read_tree(tree.to_string()).words() == source.split()
        repairer(source, target)
    assert repairer.repairs["repaired_sentences"] == 0, repairer.summary()
    assert repairer.repairs["sentences"] == len(sources) * beam


def test_unconstrained_decoding_stays_available():
  problem = registry.problem("ptb_sample")
  hp = DecodeHParams().override(problem.default_decode_hparams).override("constrain_trees=false")
  assert problem.decode_constraint(hp, {}) is None


# --- target_words: each word written in place of its XX ---
@pytest.fixture(scope="module")
def word_data(tmp_path_factory):
  """ptb_sample's data with target_words=true, written once for the tests below."""
  from tests.helpers import SHARED
  if not os.path.isdir(SHARED):
    pytest.skip("../shared not found")
  data = tmp_path_factory.mktemp("ptb_word_data")
  problem = registry.problem("ptb_sample")
  problem.configure("target_words=true")
  problem.generate_data(str(data), ptb_dir(SHARED))
  return str(data)


def word_problem(data_dir):
  """ptb_sample as the trainer and decoder see it: options read from data_dir, none passed."""
  problem = registry.problem("ptb_sample")
  problem.use_saved_options(data_dir)
  return problem


def test_word_targets_are_the_source_pieces_between_whole_brackets(word_data):
  """Without the bracket symbols a target's ids are its source's ids: the words can be copied."""
  problem = word_problem(word_data)
  assert problem.options.target_words
  encoder = problem.encoders(word_data)["targets"]
  pieces = [encoder.processor.id_to_piece(i) for i in range(encoder.vocab_size)]
  assert "\u2581XX" not in pieces  # No XX in these targets, so no XX symbol.
  sources, _ = problem.eval_text("dev", word_data)
  targets = open(problem.text_path(word_data, "dev", "targets")).read().splitlines()
  symbols = {p: i for i, p in enumerate(pieces)}
  assert len(sources) == len(targets) == 273
  checked = 0
  for source, target in zip(sources, targets):
    assert "XX" not in target.split()
    ids = encoder.encode(target)
    assert encoder.decode(ids) == target
    brackets = {t for t in target.split() if linearize.is_open(t) or linearize.is_close(t)}
    if not all("\u2581" + t in symbols for t in brackets):
      continue  # A label that train never has (WHADJP): not a symbol, and never decoded.
    checked += 1
    bracket_ids = {symbols["\u2581" + t] for t in brackets}
    assert [i for i in ids if i not in bracket_ids] == encoder.encode(source)
    assert sum(i in bracket_ids for i in ids) == len(target.split()) - len(source.split())
  assert checked >= 270


def test_one_data_dir_holds_one_target_form(word_data, shared_dir):
  problem = registry.problem("ptb_sample")  # target_words=false, the default.
  with pytest.raises(ProblemError, match="target_words=True not False"):
    problem.generate_data(word_data, ptb_dir(shared_dir))


def test_a_data_dir_from_before_target_words_reads_as_the_xx_form(tmp_path, shared_dir):
  problem = registry.problem("ptb_sample")
  problem.generate_data(str(tmp_path), ptb_dir(shared_dir))
  path = problem.options_path(str(tmp_path))
  with open(path) as f:
    saved = json.load(f)
  assert saved["target_words"] is False
  del saved["target_words"]  # As written before the option existed.
  with open(path, "w") as f:
    json.dump(saved, f)
  again = registry.problem("ptb_sample")
  again.use_saved_options(str(tmp_path))
  assert again.options.target_words is False
  again.generate_data(str(tmp_path), ptb_dir(shared_dir))  # Accepted: the same options.
  other = registry.problem("ptb_sample")
  other.configure("target_words=true")
  with pytest.raises(ProblemError, match="target_words=False not True"):
    other.generate_data(str(tmp_path), ptb_dir(shared_dir))


def test_constrained_decoding_with_words_needs_no_repair_even_from_an_untrained_model(word_data):
  """Untrained, the beams are trees whose words are exactly the source's, greedy and beam."""
  from t2tlite.decoding.decoder import Decoder
  from t2tlite.decoding.pipeline import DecodePipeline
  from t2tlite.models.transformer import Transformer
  from tests.helpers import tiny_hparams
  problem = word_problem(word_data)
  encoders = problem.encoders(word_data)
  vocab = encoders["targets"].vocab_size
  model = Transformer(tiny_hparams(xla=False, input_vocab_size=vocab, target_vocab_size=vocab))
  sources, gold = problem.eval_text("dev", word_data)
  chosen = sorted(range(len(sources)), key=lambda i: len(sources[i]))[:5] + [7]  # And a long one.
  sources, gold = [sources[i] for i in chosen], [gold[i] for i in chosen]
  for beam in (1, 3):
    hp = DecodeHParams().override(problem.default_decode_hparams).override(
        f"beam_size={beam},extra_length=60,return_beams=true")
    constraint = problem.decode_constraint(hp, encoders)
    assert constraint.target_words
    repairer = problem.decode_postprocessor(hp)
    assert repairer.target_words
    nbest = Decoder(model, hp, constraint).decode_nbest(
        [encoders["inputs"].encode(s) for s in sources])
    for source, beams in zip(sources, nbest):
      assert len(beams) == beam
      for target in (encoders["targets"].decode(ids) for ids, _ in beams):
        words = [t for t in target.split() if not (linearize.is_open(t) or linearize.is_close(t))]
        assert words == source.split()
        assert trees.read_tree(repairer(source, target)).words() == source.split()
    assert repairer.repairs["repaired_sentences"] == 0, repairer.summary()
    assert repairer.repairs["sentences"] == len(sources) * beam
  # The pipeline t2t-decoder and the trainer's dev decoding run: scored trees, none repaired.
  decoded = DecodePipeline(problem, model, hp, word_data).decode(sources, gold)
  assert decoded.postprocess_summary.startswith(f"0 of {len(sources) * beam} ")
  assert [trees.read_tree(t).words() for t in decoded.best] == [s.split() for s in sources]
  assert 0 <= decoded.metrics["parse_f1"] <= 100
