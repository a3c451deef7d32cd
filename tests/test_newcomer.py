"""A newcomer's first hour: --help, --registry_help, --hparams_help, t2t's names, xla=auto,
progress lines, and no TensorFlow start-up noise."""

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from t2tlite import describe, registry, tf_noise, xla_choice
from t2tlite.progress import Progress
from tests.helpers import REPO, tiny_hparams


def _entry_points():
  """{command: module} from setup.py's console_scripts, read as text (the install's truth)."""
  with open(os.path.join(REPO, "setup.py")) as f:
    found = re.findall(r'"(t2t-[\w-]+)=t2tlite\.bin\.(\w+):run"', f.read())
  assert len(found) >= 7, found
  return dict(found)


def _defined_flags(module):
  """(name, help) of every flags.DEFINE_* in bin/<module>.py, plus the shared ones it asks for."""
  def defines(path, only_function=None):
    tree = ast.parse(open(path).read())
    if only_function:
      tree = next(n for n in ast.walk(tree)
                  if isinstance(n, ast.FunctionDef) and n.name == only_function)
    out = []
    for node in ast.walk(tree):
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr.startswith("DEFINE_") and len(node.args) >= 3):
        name, help_text = node.args[0], node.args[2]
        if isinstance(name, ast.Constant) and isinstance(help_text, (ast.Constant, ast.JoinedStr)):
          out.append((name.value, ast.literal_eval(help_text)
                      if isinstance(help_text, ast.Constant) else None))
    return out

  path = os.path.join(REPO, "bin", f"{module}.py")
  flags = defines(path)
  source = open(path).read()
  if "define_registry_flags(" in source:
    shared = defines(os.path.join(REPO, "t2tlite", "cli.py"), "define_registry_flags")
    if "with_hparams=False" in source:
      shared = [(n, h) for n, h in shared if n not in ("hparams_set", "hparams", "hparams_help")]
    flags += shared
  return flags


def _squash(text):
  """Whitespace collapsed, and no break after a hyphen (absl wraps help text there too)."""
  return re.sub(r"-\s+", "-", " ".join(text.split()))


def _run(args, env=None):
  return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO,
                        env=dict(os.environ, **(env or {})))


NOISE_MARKERS = ("cudart_stub", "absl::InitializeLog", "cpu_feature_guard", "cuInit",
                 "cuda_platform")


@pytest.mark.parametrize("command,module", sorted(_entry_points().items()))
def test_help_prints_the_commands_own_flags_with_their_help(command, module):
  script = os.path.join(os.path.dirname(sys.executable), command)
  args = [script] if os.access(script, os.X_OK) else [sys.executable, "-m",
                                                      f"t2tlite.bin.{module}"]
  proc = _run(args + ["--help"])
  out = _squash(proc.stdout)
  flags = _defined_flags(module)
  assert len(flags) >= 2, flags
  for name, help_text in flags:
    assert re.search(rf"--(\[no\])?{name}:", out), (name, proc.stdout)
    if help_text:
      assert _squash(help_text)[:60] in out, (name, help_text)
  assert "--verbosity" in out
  first_line = open(os.path.join(REPO, "bin", f"{module}.py")).read().split('"""')[1]
  assert _squash(first_line.splitlines()[0]) in out  # The command's docstring is the usage.
  for marker in NOISE_MARKERS:
    assert marker not in proc.stderr + proc.stdout


def test_help_as_a_module_lists_the_shared_flags_too():
  proc = _run([sys.executable, "-m", "t2tlite.bin.t2t_datagen", "--help"])
  out = _squash(proc.stdout)
  for name in ("problem", "data_dir", "tmp_dir", "problem_options"):
    assert f"--{name}:" in out, proc.stdout


def _decode_a_run_of_another_problem(folder, *flags):
  """The decoder loads the problem (and TensorFlow with it), then finds the run in `folder`
  trained on another (a missing run is found before TensorFlow: test_cli.py)."""
  registry.hparams("transformer_tiny").save(os.path.join(folder, "hparams.json"))
  with open(os.path.join(folder, "run.json"), "w") as f:
    json.dump({"problem": "algorithmic_copy"}, f)
  return _run([sys.executable, "-m", "t2tlite.bin.t2t_decoder", "--problem=algorithmic_reverse",
               f"--output_dir={folder}", *flags], env={"TF_CPP_MIN_LOG_LEVEL": ""})


def test_a_quick_error_after_tensorflow_loads_is_one_line_without_noise(tmp_path):
  proc = _decode_a_run_of_another_problem(tmp_path)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      f"t2t_decoder.py: error: --problem=algorithmic_reverse but --output_dir={tmp_path} was "
      "trained on algorithmic_copy"], proc.stderr


def test_verbosity_1_keeps_tensorflows_start_up_lines(tmp_path):
  # Also the proof that the command above loads TensorFlow before its error.
  if xla_choice.accelerator():
    pytest.skip("with a GPU TensorFlow does not print the no-CUDA lines")
  proc = _decode_a_run_of_another_problem(tmp_path, "--verbosity=1")
  assert proc.returncode == 2 and "cudart_stub" in proc.stderr, proc.stderr


def test_retracing_and_sharding_lines_are_dropped_once_the_commands_are_loaded():
  import logging
  import t2tlite.cli  # noqa: F401 - installs the filters, as every command does.
  for name, noise in (("tensorflow", "5 out of the last 5 calls to <function f> triggered "
                       "tf.function retracing."),
                      ("absl", "Sharding callback duration: 295 microseconds")):
    noisy, real = (logging.LogRecord(name, logging.INFO, __file__, 1, text, None, None)
                   for text in (noise, "a real one"))
    logger = logging.getLogger(name)
    assert not logger.filter(noisy) and logger.filter(real)


def test_filtered_stderr_drops_only_the_known_noise(capfd):
  with tf_noise.FilteredStderr():
    os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are "
                b"written to STDERR\n")
    os.write(2, b"I0000 00:00:1.2 6632 cudart_stub.cc:31] Could not find cuda drivers on your "
                b"machine, GPU will not be used.\n")
    os.write(2, b"a real warning\n")
    os.write(2, b"E0000 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n")
  assert capfd.readouterr().err == "a real warning\n"


def test_optional_imports_fail_only_inside_the_block_and_loaded_ones_stay(monkeypatch):
  from t2tlite import optional_imports
  monkeypatch.delitem(sys.modules, "colorsys", raising=False)  # A small stdlib module, unloaded.
  with optional_imports.skipped(("colorsys", "json")) as hidden:
    assert hidden == ["colorsys"]  # json is loaded already: hiding it would break its users.
    with pytest.raises(ImportError):
      import colorsys  # noqa: F401
    import json  # noqa: F401
  import colorsys  # noqa: F401, F811 - importable again after the block.
  assert colorsys.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)


@pytest.mark.parametrize("backend,first", [("tensorflow", "keras"), ("jax", "tensorflow")])
def test_a_command_loads_tensorflow_without_the_optional_packages_it_never_calls(backend, first):
  # As a command does: t2tlite.cli first, then TensorFlow or Keras (the trainer imports Keras
  # first; either loads the other); afterwards the packages still import.
  second = "tensorflow" if first == "keras" else "keras"
  code = textwrap.dedent(f"""
      import sys
      import t2tlite.cli
      import {first}, {second}
      print(sorted(m for m in ("IPython", "jax", "matplotlib", "scipy") if m in sys.modules))
      import jax, matplotlib.pyplot, scipy.sparse
      print(keras.backend.backend(), jax.numpy.add(1, 2), matplotlib.pyplot.__name__,
            scipy.sparse.issparse(scipy.sparse.eye(2)))""")
  proc = _run([sys.executable, "-c", code], env={"KERAS_BACKEND": backend})
  assert proc.returncode == 0, proc.stderr
  loaded, after = proc.stdout.strip().splitlines()
  # Under the JAX backend Keras needs jax and scipy while TensorFlow loads: left alone.
  assert loaded == ("['jax', 'scipy']" if backend == "jax" else "[]")
  assert after == f"{backend} 3 matplotlib.pyplot True"


@pytest.mark.parametrize("argv,level", [
    (["t2t-trainer"], 0), (["t2t-trainer", "--verbosity=1"], 1), (["x", "-v", "2"], 2),
    (["x", "--verbosity", "1", "--problem=p"], 1), (["x", "-v=bad"], 0)])
def test_verbosity_is_read_from_the_command_line_before_flags_parse(argv, level):
  assert tf_noise.verbosity_from_argv(argv) == level


# --- --registry_help and t2t's names ---

def test_registry_help_gives_every_name_a_line_from_its_docstring_or_its_change():
  text = describe.registry_help()
  lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")
           and not line.startswith("    ")}
  for reg in (registry.PROBLEMS, registry.HPARAMS, registry.MODELS):
    for name in reg.names():
      assert name in lines, name
      description = lines[name][len("  "):].split(None, 1)
      assert len(description) == 2 and description[1].strip(), lines[name]
  assert lines["wmt_ende"].endswith("WMT14 English -> German, 37000 shared BPE tokens "
                                    "(the paper's Table 2 EN-DE).")
  # Table 3 row (A), h=4: the paper's row changes only the number of heads.
  assert "transformer_base with num_heads=4 [Table 3 row (A)" in lines["transformer_base_h4"]
  # Row (B): d_k=16 with d_v kept at 64.
  assert "transformer_base with d_k=16, d_v=64 [" in lines["transformer_base_dk16"]
  assert "transformer_base with dropout=0.0 [" in lines["transformer_base_drop0"]


def test_generated_set_descriptions_name_exactly_the_fields_that_differ():
  base = registry.hparams("transformer_base")
  for name in registry.HPARAMS.names():
    fn = registry.HPARAMS.get(name)
    if fn.__doc__:
      continue
    text = describe.set_description(fn)
    changed = {f.name for f in dataclasses.fields(base)
               if getattr(registry.hparams(name), f.name) != getattr(base, f.name)}
    named = set(re.findall(r"(\w+)=", text.split("[")[0]))
    assert text.startswith("transformer_base with ") and named == changed, (name, text)


def test_t2t_names_are_aliases_listed_under_their_canonical_problem():
  for alias, canonical in [("translate_ende_wmt32k", "wmt_ende"),
                           ("translate_ende_wmt8k", "wmt_ende"),
                           ("translate_enfr_wmt32k", "wmt_enfr"),
                           ("parsing_english_ptb8k", "wsj_parsing"),
                           ("parsing_english_ptb16k", "wsj_parsing")]:
    problem = registry.problem(alias)
    assert type(problem) is registry.PROBLEMS.get(canonical) and problem.name == canonical
    assert alias in registry.PROBLEMS and alias not in registry.PROBLEMS.names()
  assert registry.model("transformer").__name__ == "Transformer"
  text = describe.registry_help().splitlines()
  at = next(i for i, line in enumerate(text) if line.startswith("  wmt_ende "))
  block = []
  for line in text[at + 1:]:
    if not line.startswith("    alias "):
      break
    block.append(line)
  assert [line.split()[1].rstrip(":") for line in block] == ["translate_ende_wmt32k",
                                                            "translate_ende_wmt8k"]
  assert "37000" in block[0] and "32768" in block[0]  # Says how ours differs.


def test_registry_aliases_generically():
  reg = registry.Registry("thing")

  @reg.register("alpha", aliases=("a_first",))
  def alpha():
    """The first."""

  reg.alias("a", "alpha", "short")
  assert reg.get("a") is alpha and reg.get("a_first") is alpha and reg.canonical("a") == "alpha"
  assert reg.names() == ["alpha"] and reg.aliases_of("alpha") == [("a", "short"), ("a_first", "")]
  with pytest.raises(registry.RegistryError, match="no thing 'beta'"):
    reg.alias("b", "beta")
  with pytest.raises(registry.RegistryError, match="'a' is already registered"):
    reg.register("a")(lambda: None)
  with pytest.raises(registry.RegistryError, match="did you mean a_first"):
    reg.get("a_firts")


# --- --hparams_help ---

def _field_lines_by_regex(path, class_name):
  """{field: (type, default text, comment)} from the class's one-line fields, by plain regex."""
  text = open(path).read()
  body = text[text.index(f"class {class_name}"):]
  found = {}
  for m in re.finditer(r"^  (\w+): (\w+) = (.+?)  # (.*)$", body, re.M):
    found.setdefault(m.group(1), (m.group(2), m.group(3), m.group(4).strip()))
  return found


def test_hparams_help_lists_every_key_with_type_default_and_comment():
  hp_cls = type(registry.hparams("transformer_base"))
  import inspect
  expected = _field_lines_by_regex(inspect.getsourcefile(hp_cls), hp_cls.__name__)
  text = describe.hparams_help(hp_cls)
  keys = [f.name for f in dataclasses.fields(hp_cls)]
  assert len(keys) == len(expected) >= 30
  for key in keys:
    lines = [line for line in text.splitlines() if line.startswith(f"  {key} (")]
    assert len(lines) == 1, key
    type_name, default, comment = expected[key]
    assert lines[0] == (f"  {key} ({type_name}, default "
                        f"{getattr(hp_cls(), key)!r}): {comment}"), lines[0]
  assert "  d_model (int, default 512): Width of embeddings and every sub-layer output." in text
  assert "Regularization (Section 5.4):" in text


def test_field_comments_are_read_from_wherever_the_class_lives(tmp_path, monkeypatch):
  (tmp_path / "elsewhere_hp.py").write_text(textwrap.dedent('''\
      import dataclasses

      @dataclasses.dataclass(frozen=True)
      class Config:
        # --- First part ---
        width: int = 3  # How wide.
        # A plain comment, not a heading.
        names: str = (
            "a")  # Comment on the closing line.

        # --- Second part ---
        flag: bool = False
      '''))
  monkeypatch.syspath_prepend(str(tmp_path))
  import elsewhere_hp
  fields = describe.hparams_fields(elsewhere_hp.Config)
  assert [(f.name, f.type_name, f.default, f.comment, f.section) for f in fields] == [
      ("width", "int", 3, "How wide.", "First part"),
      ("names", "str", "a", "Comment on the closing line.", "First part"),
      ("flag", "bool", False, "", "Second part")]


# --- xla=auto ---

def test_xla_defaults_to_auto_and_old_runs_still_load(tmp_path):
  hp = registry.hparams("transformer_base")
  assert hp.xla == "auto"
  for saved, loaded in ((True, "true"), (False, "false"), ("auto", "auto")):
    path = tmp_path / f"{saved}.json"
    path.write_text(json.dumps(dict(hp.to_dict(), xla=saved)))
    assert type(hp).load(str(path)).xla == loaded
  assert hp.override("xla=1").xla == "true" and hp.replace(xla=False).xla == "false"


def test_auto_trains_uncompiled_on_cpu_and_always_compiles_the_decode_search(caplog):
  if xla_choice.accelerator():
    pytest.skip("this machine has a GPU/TPU: auto compiles the train step there")
  xla_choice._logged.clear()
  with caplog.at_level("INFO", logger="absl"):
    assert xla_choice.train_xla(tiny_hparams(xla="auto")) is False
    assert xla_choice.train_xla(tiny_hparams(xla="auto")) is False
  assert [r.getMessage() for r in caplog.records].count(
      "xla for training: auto -> off (CPU)") == 1
  assert xla_choice.train_xla(tiny_hparams(xla=True)) is True
  assert xla_choice.decode_xla(tiny_hparams(xla="auto")) is True
  assert xla_choice.decode_xla(tiny_hparams(xla="false")) is False
  # The decode hparam overrides the run's choice either way; "auto" defers to it.
  assert xla_choice.decode_xla(tiny_hparams(xla="false"), "true") is True
  assert xla_choice.decode_xla(tiny_hparams(xla="auto"), "false") is False
  assert xla_choice.decode_xla(tiny_hparams(xla="false"), "auto") is False


def test_decoder_and_train_step_follow_the_choice():
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.decoder import Decoder
  from t2tlite.models.transformer import Transformer
  from t2tlite.overrides import OverrideError
  from t2tlite.training import train_step
  model = Transformer(tiny_hparams(xla="auto"))
  assert Decoder(model).search_ids._jit_compile is True
  assert Decoder(Transformer(tiny_hparams(xla="false"))).search_ids._jit_compile is False
  compiled = DecodeHParams().override("xla=true")
  assert Decoder(Transformer(tiny_hparams(xla="false")), compiled).search_ids._jit_compile is True
  with pytest.raises(OverrideError, match="xla='maybe'"):
    DecodeHParams().override("xla=maybe")
  if not xla_choice.accelerator():
    step = train_step.make_eval_step(model, model.hparams)
    assert step._reduce_retracing is True  # Uncompiled: shape-relaxed tracing.


def test_a_run_saved_with_xla_true_resumes_under_auto(tmp_path):
  from t2tlite.training import run_dir
  hp = tiny_hparams(xla=True)
  run_dir.prepare(str(tmp_path), hp, {"problem": "algorithmic_reverse"})
  run_dir.prepare(str(tmp_path), hp.replace(xla="auto"), {"problem": "algorithmic_reverse"})
  with pytest.raises(run_dir.RunDirError, match="d_model"):
    run_dir.prepare(str(tmp_path), hp.replace(d_model=64), {"problem": "algorithmic_reverse"})


# --- Progress ---

class FakeClock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_progress_reports_done_total_rate_and_eta_at_the_interval():
  clock, lines = FakeClock(), []
  progress = Progress("decoding", 100, "lines", interval=10, clock=clock, write=lines.append)
  clock.now += 5
  assert progress.update(10) is None  # Before the interval: nothing.
  clock.now += 5
  # 20 lines in 10 s: 2 lines/s, 80 left -> 40 s.
  assert progress.update(20) == "decoding: 20/100 lines (20.0%), 2.0 lines/s, ETA 0m40s"
  clock.now += 3
  assert progress.update(30) is None  # 3 s after the last line.
  clock.now += 7
  assert progress.update(50) == "decoding: 50/100 lines (50.0%), 2.5 lines/s, ETA 0m20s"
  clock.now += 20
  assert progress.finish(100) == "decoding: 100 lines in 40.0 s (2.5 lines/s)"
  assert len(lines) == 3
  unknown = Progress("pairs", None, "pairs", interval=0, clock=clock, write=lines.append)
  clock.now += 4
  assert unknown.update(8) == "pairs: 8 pairs, 2.0 pairs/s"


def test_progress_interval_comes_from_the_environment(monkeypatch):
  monkeypatch.setenv("T2T_PROGRESS_SECONDS", "0")
  assert Progress("x").interval == 0
  monkeypatch.setenv("T2T_PROGRESS_SECONDS", "soon")
  assert Progress("x").interval == 10


def test_decoder_reports_progress_after_each_batch():
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.decoder import Decoder
  from t2tlite.models.transformer import Transformer
  decoder = Decoder(Transformer(tiny_hparams(xla="false")),
                    DecodeHParams(beam_size=1, extra_length=2, batch_size=2))
  sources = [[3, 4], [], [5], [6, 7, 8], [9], [4, 4]]
  seen = []
  decoder.decode_nbest(sources, progress=seen.append)
  batches = decoder.batches([len(s) for s in sources])
  # The empty source counts as done from the start; each batch adds its size as it finishes
  # (batches searched at once, on a CPU with several cores, may finish in any order).
  increments = [b - a for a, b in zip([1] + seen, seen)]
  assert sorted(increments) == sorted(len(batch) for batch in batches)
  assert seen[-1] == len(sources) and len(batches) == 3


def test_datagen_reports_pairs_with_total_and_eta(shared_dir, tmp_path):
  nc = os.path.join(shared_dir, "data", "wmt", "moses_nc-5k_fr-en")
  proc = _run([sys.executable, "-m", "t2tlite.bin.t2t_datagen", "--problem=translate_files",
               f"--data_dir={tmp_path}", f"--problem_options=train_source={nc}/nc-5k.fr,"
               f"train_target={nc}/nc-5k.en,vocab_size=2000"],
              env={"T2T_PROGRESS_SECONDS": "0"})
  assert proc.returncode == 0, proc.stderr[-2000:]
  # 5000 lines in the source file (the ETA's total); 13 pairs with an empty side are dropped
  # (PROVENANCE.md). Pairs are tokenized in chunks: this file is one.
  assert re.search(r"translate_files train: 4,987/5,000 pairs \(99\.7%\), [\d,.]+ pairs/s, "
                   r"ETA 0m00s", proc.stderr), proc.stderr[-2000:]
  assert re.search(r"translate_files train: 4,987 pairs in [\d.]+ s \([\d,.]+ pairs/s\)",
                   proc.stderr)


def test_generated_problems_report_pairs_too(tmp_path, monkeypatch, caplog):
  from t2tlite import registry
  problem = registry.problem("algorithmic_reverse")
  monkeypatch.setattr(problem, "split_sizes", {"train": 30, "dev": 5, "test": 5})
  monkeypatch.setenv("T2T_PROGRESS_SECONDS", "0")
  with caplog.at_level("INFO", logger="absl"):
    problem.generate_data(str(tmp_path))
  lines = [r.getMessage() for r in caplog.records]
  assert any(re.match(r"algorithmic_reverse train: 30/30 pairs \(100\.0%\), [\d,.]+ pairs/s, "
                      r"ETA 0m00s$", line) for line in lines), lines
  assert any(re.match(r"algorithmic_reverse test: 5 pairs in [\d.]+ s", line) for line in lines)


def test_averaging_reports_each_checkpoint(tmp_path, monkeypatch, caplog):
  import tensorflow as tf
  from t2tlite.models.transformer import Transformer
  from t2tlite.training import averaging, checkpoints, run_dir
  hp = tiny_hparams(xla="false")
  run_dir.prepare(str(tmp_path), hp, {"model": "transformer"})
  model = Transformer(hp)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=checkpoints.model_trackable(
      model)), str(tmp_path), max_to_keep=5, checkpoint_name="ckpt")
  for step in (1, 2, 3):
    manager.save(checkpoint_number=step)
  monkeypatch.setenv("T2T_PROGRESS_SECONDS", "0")
  with caplog.at_level("INFO", logger="absl"):
    averaging.average_checkpoints(str(tmp_path), 3)
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("averaging: ")]
  assert [line.split(" (")[0] for line in lines] == [
      "averaging: 1/3 checkpoints", "averaging: 2/3 checkpoints", "averaging: 3/3 checkpoints"]


def test_help_piped_into_a_reader_that_stops_early_ends_without_a_traceback():
  """`t2t-trainer --hparams_help | head -1`: once the reader closes the pipe, the command
  stops quietly (exit 1, Python's documented recipe) instead of a BrokenPipeError traceback.
  The pipe is closed before the command writes, so the test does not depend on timing."""
  proc = subprocess.Popen([sys.executable, os.path.join(REPO, "bin", "t2t_trainer.py"),
                           "--hparams_help"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
  proc.stdout.close()
  stderr = proc.stderr.read().decode()
  assert proc.wait(timeout=300) == 1
  assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr[-2000:]
