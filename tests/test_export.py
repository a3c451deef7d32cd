"""t2t-exporter and t2t-decoder --decode_interactive: the export decodes what t2t-decoder writes.

The truth is t2t-decoder itself, run as a command on the same checkpoint with
the same decode hparams; the export is read back by a client whose only
imports are tensorflow and tensorflow_text (and the standard library).
"""

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.helpers import (IMPORT_LOG, SHARED, TINY_SHAPE, command, one_line_error, run,
                           tensorflow_imported)

MULTI30K = os.path.join(SHARED, "data", "multi30k")
needs_data = pytest.mark.skipif(not os.path.isdir(MULTI30K), reason="../shared/data not found")
# Not the paper's defaults, so a value that is not baked in shows; max_input_length cuts some
# Multi30k sources (of 1000-piece vocabulary) so truncation is exercised and counted.
M30K_DECODE = "beam_size=3,alpha=0.8,extra_length=12,max_input_length=20"
TINY_DECODE = "beam_size=2,alpha=0.6,extra_length=4"
M30K_STEPS = 300  # Enough for outputs that differ from line to line.

# The client: tensorflow and tensorflow_text, nothing of this package (checked).
CLIENT = textwrap.dedent("""
    import json, random, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the sentencepiece ops)
    export, sources_path = sys.argv[1:3]
    serve = tf.saved_model.load(export).signatures["serving_default"]
    with open(sources_path, encoding="utf-8") as f:
      lines = f.read().split(chr(10))[:-1]
    def decode(batch):
      out = serve(inputs=tf.constant(batch))
      return ([t.decode("utf-8") for t in out["outputs"].numpy()],
              out["scores"].numpy().tolist(), int(out["truncated"].numpy().sum()))
    def in_chunks(order, sizes):
      outputs, scores, truncated, i = [None] * len(lines), [None] * len(lines), 0, 0
      while i < len(order):
        chunk = order[i:i + next(sizes)]
        texts, chunk_scores, cut = decode([lines[j] for j in chunk])
        for j, text, score in zip(chunk, texts, chunk_scores):
          outputs[j], scores[j] = text, score
        truncated += cut
        i += len(chunk)
      return dict(outputs=outputs, scores=scores, truncated=truncated)
    rng = random.Random(7)
    shuffled = list(range(len(lines)))
    rng.shuffle(shuffled)
    results = {
        "big_batch": in_chunks(list(range(len(lines))), iter([len(lines)])),
        "shuffled": in_chunks(shuffled, iter(lambda: rng.randint(1, 97), None)),
        "one_by_one": in_chunks(list(range(len(lines))), iter(lambda: 1, None)),
    }
    assert not [m for m in sys.modules if m.startswith("t2tlite")]
    print(json.dumps(results))
""")


def client(export_dir, sources_path):
  """{mode: {outputs, scores, truncated}} of the client, for each way of batching."""
  proc = subprocess.run([sys.executable, "-c", CLIENT, export_dir, sources_path],
                        capture_output=True, text=True, timeout=900, cwd=os.path.dirname(export_dir),
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=""))
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def m30k_run(tmp_path_factory):
  """A tiny model trained briefly on real Multi30k (1000-piece vocabulary) and its export."""
  if not os.path.isdir(MULTI30K):
    pytest.skip("../shared/data not found")
  from t2tlite import registry
  from t2tlite.training.options import TrainOptions
  from t2tlite.training.trainer import Trainer
  root = tmp_path_factory.mktemp("m30k_export")
  data, out = str(root / "data"), str(root / "run")
  problem = registry.problem("multi30k_ende")
  problem.configure("vocab_size=1000")
  problem.generate_data(data, MULTI30K)
  hp = registry.hparams("transformer_tiny").replace(**TINY_SHAPE, batch_size=1024, xla=False,
                                                   learning_rate_warmup_steps=100)
  options = TrainOptions(train_steps=M30K_STEPS, eval_every=0, eval_steps=1, eval_decode=False,
                         save_checkpoints_steps=M30K_STEPS, save_checkpoints_secs=0, log_every=50)
  Trainer(problem, hp, out, data, options=options).train()
  export = run("t2t-exporter", "--problem=multi30k_ende", f"--data_dir={data}",
               f"--output_dir={out}", f"--export_dir={root}/export",
               f"--decode_hparams={M30K_DECODE}")
  return dict(data=data, out=out, export=export.stdout.strip().splitlines()[-1], root=root)


@pytest.mark.slow  # Trains a Multi30k model for minutes; the algorithmic export tests stay in CI.
@needs_data
def test_multi30k_export_decodes_what_t2t_decoder_writes_however_batched(m30k_run):
  """Line for line, for one line at a time, shuffled batches and one batch of all 1000."""
  root, data = m30k_run["root"], m30k_run["data"]
  sources = os.path.join(data, "multi30k_ende-test.inputs")
  decoded = run("t2t-decoder", "--problem=multi30k_ende", f"--data_dir={data}",
                f"--output_dir={m30k_run['out']}", f"--decode_from_file={sources}",
                f"--decode_to_file={root}/test.decoded", f"--decode_hparams={M30K_DECODE}")
  with open(f"{root}/test.decoded", encoding="utf-8") as f:
    expected = f.read().split("\n")[:-1]
  assert len(expected) == 1000 and len(set(expected)) >= 10  # Outputs that depend on the source.
  cut = [l for l in decoded.stderr.splitlines() if "were truncated" in l]
  assert cut, decoded.stderr[-2000:]  # Some sources exceed max_input_length=20 ...
  expected_cut = int(cut[0].split("] ")[-1].split()[0])
  for mode, got in client(m30k_run["export"], sources).items():
    same = sum(a == b for a, b in zip(got["outputs"], expected))
    assert same == len(expected) == len(got["outputs"]), (mode, same)
    assert got["truncated"] == expected_cut  # ... and the export counts the same ones.
    assert all(s < 0 for s in got["scores"])


@pytest.mark.slow  # Needs the Multi30k model above.
@needs_data
def test_export_holds_its_vocabulary_and_decode_hparams(m30k_run):
  export = m30k_run["export"]
  step = int(os.path.basename(export)) // 10
  assert os.path.basename(export) == str(10 * step)  # A checkpoint of the run: source 0.
  assert os.listdir(os.path.join(export, "assets")) == ["vocab.multi30k_ende.1000.model"]
  with open(os.path.join(export, "assets", "vocab.multi30k_ende.1000.model"), "rb") as f:
    vocab = f.read()
  with open(os.path.join(m30k_run["data"], "vocab.multi30k_ende.1000.model"), "rb") as f:
    assert f.read() == vocab
  with open(os.path.join(export, "assets.extra", "t2tlite_export.json")) as f:
    info = json.load(f)
  assert (info["decode_hparams"]["beam_size"], info["decode_hparams"]["alpha"],
          info["max_input_length"], info["step"]) == (3, 0.8, 19, step)  # 19 tokens + EOS.


@pytest.fixture(scope="module")
def tiny_export(tiny_run, tmp_path_factory):
  """The session's tiny algorithmic run, exported with t2t-exporter (nbest and plain)."""
  root = tmp_path_factory.mktemp("tiny_export")
  plain = run("t2t-exporter", "--problem=algorithmic_reverse", f"--output_dir={tiny_run.output_dir}",
              f"--export_dir={root}/export", f"--decode_hparams={TINY_DECODE}")
  return dict(root=root, export=plain.stdout.strip().splitlines()[-1], run=tiny_run)


def _pipeline(tiny_run, decode_hparams):
  from tests.helpers import tiny_problem
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.pipeline import DecodePipeline
  return DecodePipeline(tiny_problem(), tiny_run.trainer.model,
                        DecodeHParams().override(decode_hparams))


def test_algorithmic_export_equals_the_pipeline_with_nbest(tiny_run, tmp_path):
  """Digit strings in and out; nbest=2 gives [batch, 2] outputs and scores, best first."""
  from t2tlite.decoding import export
  from tests.helpers import tiny_problem
  sources, _ = tiny_problem().eval_text("test", None)
  sources = sources[:40] + ["", "  ", "3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3 2 3 8 4 6 2 6 4 3"]
  pipeline = _pipeline(tiny_run, TINY_DECODE + ",nbest=2,max_input_length=12")
  decoded = pipeline.decode(sources)
  path = export.export(pipeline, tiny_run.output_dir + "/ckpt-200", str(tmp_path), 2001)
  exported = export.Exported(str(tmp_path))  # The newest (only) version.
  assert exported.path == path
  texts, scores, truncated = exported.decode(sources)
  assert [len(t) for t in texts] == [2] * len(sources)
  for hyps, got, got_scores in zip(decoded.hypotheses, texts, scores):
    if not hyps:
      assert got == ["", ""] and got_scores == [0.0, 0.0]
      continue
    assert got == [h.text for h in hyps]
    np.testing.assert_allclose(got_scores, [h.score for h in hyps], rtol=1e-4)
  assert sum(truncated) == decoded.truncated > 0  # Sources over 11 digits were cut.


def test_saved_model_cli_shows_and_runs_the_export(tiny_export):
  export = tiny_export["export"]
  show = subprocess.run(["saved_model_cli", "show", "--all", "--dir", export],
                        capture_output=True, text=True, timeout=300)
  assert show.returncode == 0, show.stderr[-2000:]
  assert "signature_def['serving_default']" in show.stdout
  assert "inputs['inputs'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in show.stdout
  for name in ("outputs", "scores", "truncated"):
    assert f"outputs['{name}'] tensor_info" in show.stdout
  ran = subprocess.run(["saved_model_cli", "run", "--dir", export, "--tag_set", "serve",
                        "--signature_def", "serving_default",
                        "--input_exprs", 'inputs=["1 2 3 4", "", "9 8"]'],
                       capture_output=True, text=True, timeout=300)
  assert ran.returncode == 0, ran.stderr[-2000:]
  pipeline = _pipeline(tiny_export["run"], TINY_DECODE)
  expected = pipeline.decode(["1 2 3 4", "", "9 8"]).lines
  outputs = ran.stdout.split("Result for output key outputs:\n")[1].splitlines()[0]
  assert outputs == "[" + " ".join(repr(l.encode()) for l in expected) + "]"


def test_versions_are_unique_and_never_overwritten_unasked(tiny_export):
  """The average and the plain checkpoint of one step get their own versions."""
  from t2tlite.training import averaging
  tiny = tiny_export["run"]
  step = tiny.steps[-1]
  plain = tiny_export["export"]  # The run's newest checkpoint.
  averaged = averaging.averaged_path(tiny.output_dir, step)  # The run averaged its last 3.
  export_dir = os.path.dirname(plain)
  args = ["--problem=algorithmic_reverse", f"--output_dir={tiny.output_dir}",
          f"--export_dir={export_dir}", f"--decode_hparams={TINY_DECODE}",
          f"--checkpoint_path={averaged}"]
  average = run("t2t-exporter", *args).stdout.strip()
  assert (plain, average) == (f"{export_dir}/{10 * step}", f"{export_dir}/{10 * step + 1}")
  again = run("t2t-exporter", *args, check=False, env=IMPORT_LOG)
  one_line_error(again, average, "--overwrite")
  assert not tensorflow_imported(again)  # Refused before anything loads.
  marker = os.path.join(average, "assets.extra", "t2tlite_export.json")
  os.utime(marker, (0, 0))
  run("t2t-exporter", *args, "--overwrite")
  assert os.stat(marker).st_mtime > 0  # Replaced when asked.
  assert sorted(os.listdir(export_dir)) == sorted([str(10 * step), str(10 * step + 1)])


def test_bad_input_is_one_line_naming_the_path(tiny_export, tmp_path):
  """Each mistake is one line naming the path; all but the damaged checkpoint (which only
  loading finds) before TensorFlow loads."""
  tiny = tiny_export["run"]
  args = ["--problem=algorithmic_reverse"]

  def refused(flags, *fragments, loads_tensorflow=False):
    proc = run("t2t-exporter", *args, *flags, check=False, env=IMPORT_LOG)
    one_line_error(proc, *fragments)
    assert tensorflow_imported(proc) == loads_tensorflow, flags

  refused([f"--output_dir={tiny.output_dir}", f"--checkpoint_path={tiny.output_dir}/ckpt-999",
           f"--export_dir={tmp_path}/e"], f"{tiny.output_dir}/ckpt-999")
  damaged = str(tmp_path / "damaged")
  shutil.copytree(tiny.output_dir, damaged)
  data = [f for f in os.listdir(damaged) if f.startswith("ckpt-200.data")][0]
  with open(os.path.join(damaged, data), "r+b") as f:
    f.seek(100)
    f.write(b"\xff" * 64)
  refused([f"--output_dir={damaged}", f"--checkpoint_path={damaged}/ckpt-200"],
          f"{damaged}/ckpt-200", loads_tensorflow=True)
  a_file = tmp_path / "a_file"
  a_file.write_text("not a directory\n")
  refused([f"--output_dir={tiny.output_dir}", f"--export_dir={a_file}"], str(a_file))
  assert a_file.read_text() == "not a directory\n"
  (tmp_path / "empty").mkdir()
  refused([f"--output_dir={tmp_path}/empty"], f"{tmp_path}/empty", "hparams.json")


def test_interactive_export_dir_that_holds_no_export_is_one_line_before_tensorflow(tmp_path):
  (tmp_path / "empty").mkdir()
  for export_dir, fragment in ((tmp_path / "missing", "no such directory"),
                               (tmp_path / "empty", "no saved_model.pb")):
    proc = run("t2t-decoder", "--decode_interactive", f"--export_dir={export_dir}",
               check=False, env=IMPORT_LOG)
    one_line_error(proc, f"--export_dir={export_dir}: {fragment}")
    assert not tensorflow_imported(proc)


def _interactive(args, lines):
  """Feeds lines one at a time, reading each answer before writing the next (so the
  command must answer each line as soon as it is decoded, not at end of input)."""
  proc = subprocess.Popen(command("t2t-decoder") + ["--decode_interactive"] + args,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  answers = []
  try:
    for line in lines:
      proc.stdin.write(line + b"\n")
      proc.stdin.flush()
      answers.append(proc.stdout.readline().decode("utf-8").rstrip("\n"))
    proc.stdin.close()
    rest = proc.stdout.read()
    stderr = proc.stderr.read().decode("utf-8", "replace")
    assert proc.wait(timeout=120) == 0, stderr[-2000:]
  finally:
    if proc.poll() is None:
      proc.kill()
  assert rest == b""
  return answers, stderr


def test_interactive_decoding_from_checkpoint_and_from_export(tiny_export):
  tiny = tiny_export["run"]
  lines = [b"1 2 3 4 5", b"", b"9 \xff 8", b"7 7 0", b"  "]
  pipeline = _pipeline(tiny, TINY_DECODE)
  expected = pipeline.decode(["1 2 3 4 5", "", "", "7 7 0", "  "]).lines
  expected[2] = ""  # The line that is not UTF-8: an empty answer, and an error on stderr.
  for args in ([f"--output_dir={tiny.output_dir}", "--problem=algorithmic_reverse",
                f"--decode_hparams={TINY_DECODE}"],
               [f"--export_dir={tiny_export['export']}"]):
    answers, stderr = _interactive(args, lines)
    assert answers == expected, args
    errors = [l for l in stderr.splitlines() if ": error: " in l]
    assert len(errors) == 1 and "standard input line 3: not UTF-8" in errors[0], stderr[-2000:]


def test_in_graph_trees_equal_the_parsing_postprocessor_on_the_sample_treebank(shared_dir):
  """Every well-formed linearized tree of the PTB sample (what the tree constraint lets the
  exported parser write) becomes, in-graph, the EVALB line t2t-decoder writes for it."""
  import tensorflow as tf
  from t2tlite.data import linearize
  from t2tlite.decoding import graph_text
  from tests.helpers import sample_trees
  # The paper's XX form, each word in place of its XX; same-label unary chains kept, collapsed
  # (the sample's trees hold a few dozen, nested up to three deep after normalisation).
  for target_words, collapse in ((False, False), (True, False), (False, True), (True, True)):
    pairs = [linearize.gold_pair(t, target_words) for t in sample_trees(shared_dir)]
    pairs = [p for p in pairs if p is not None]
    assert len(pairs) > 3000
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    repairs = linearize.Repairs()
    expected = [linearize.decoded_tree_line(t, s, repairs, target_words, collapse)
                for s, t in pairs]
    assert (repairs[linearize.COLLAPSED] > 20) == collapse
    got = graph_text.tree_lines(tf.constant(sources), tf.constant(targets),
                                collapse_unary_repeats=collapse).numpy()
    assert [g.decode("utf-8") for g in got] == expected
