"""Helpers shared by the test modules (fixtures live in conftest.py).

One place for: where the repository and ../shared are, the tiny model shape
every test trains, the tiny training run, the installed commands and their
one-line errors, and the independent truths several modules check against
(the closed-form parameter count, the paper's positional encoding, greedy
decoding recomputed from whole forward passes, the sample treebank). Test
modules import from here, never from one another.
"""

import functools
import math
import os
import re
import shutil
import subprocess
import sys
import zipfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _find_shared():
  """The project's ../shared (paper spec, real data): beside the clone, or $T2TLITE_SHARED."""
  candidates = [os.path.join(os.path.dirname(REPO), "shared"), os.environ.get("T2TLITE_SHARED", "")]
  return next((c for c in candidates if c and os.path.isdir(c)), candidates[0])


SHARED = _find_shared()

# --- The tiny model: the one shape the tests train and build ---
TINY_SHAPE = dict(d_model=32, d_ff=64, num_heads=4)
# The tiny shape with a schedule and batches that learn within a few hundred steps.
TINY_TRAINING = dict(TINY_SHAPE, batch_size=512, length_bucket_step=2.0,
                     learning_rate_warmup_steps=100)


def hparams_flag(**values) -> str:
  """--hparams=key=value,... for the command-line tests."""
  return "--hparams=" + ",".join(f"{k}={v}" for k, v in values.items())


TINY = hparams_flag(**TINY_TRAINING)  # The tiny run's hparams as a trainer flag.


def tiny_hparams(**changes):
  """transformer_tiny at the tiny shape with a 20-symbol vocabulary: fast to build dozens of times."""
  from t2tlite import registry
  hp = registry.hparams("transformer_tiny").replace(
      input_vocab_size=20, target_vocab_size=20, **TINY_SHAPE)
  return hp.replace(**changes)


# --- The tiny training run (conftest.py's session fixture `tiny_run` is one of these) ---
# XLA is off: these runs are about the loop, and compiling every bucket shape costs more
# than the steps; the XLA train step runs in test_cli.py's end-to-end run.
TINY_RUN_HPARAMS = dict(TINY_TRAINING, xla=False)


def tiny_problem():
  """algorithmic_reverse with 5000 training pairs and 100 each of dev and test."""
  from t2tlite import registry
  problem = registry.problem("algorithmic_reverse")
  problem.split_sizes = {"train": 5000, "dev": 100, "test": 100}
  return problem


def tiny_trainer(output_dir, steps, hparams_changes=None, **options):
  """A Trainer of the tiny run: same problem and hparams (but `hparams_changes`), so runs can
  resume one another."""
  from t2tlite import registry
  from t2tlite.decoding.dev_decoding import DevDecoding
  from t2tlite.training.options import TrainOptions
  from t2tlite.training.trainer import Trainer
  hp = registry.hparams("transformer_tiny").replace(**dict(TINY_RUN_HPARAMS,
                                                         **(hparams_changes or {})))
  defaults = dict(eval_every=0, eval_steps=2, log_every=10, save_checkpoints_steps=10,
                  save_checkpoints_secs=0, eval_decode_lines=8)
  opts = TrainOptions(train_steps=steps, **dict(defaults, **options))
  problem = tiny_problem()
  return Trainer(problem, hp, str(output_dir), options=opts,
                 dev_decoding=DevDecoding.from_options(problem, None, opts))


def checkpoint_values(prefix):
  """{checkpoint key: value} of the model's variables, read without building a model."""
  import tensorflow as tf
  reader = tf.train.load_checkpoint(prefix)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith("model/")}


def checkpoint_key(weight):
  """The checkpoint key of a Keras weight (tf.train escapes "." and "/")."""
  escaped = weight.path.replace(".", "..").replace("/", ".S")
  return f"model/{escaped}/.ATTRIBUTES/VARIABLE_VALUE"


def load_script(relative_path):
  """A script of the repository that is not in the package (recipes/*.py, bench/*.py), as a
  module. Its own directory is on sys.path while it loads, as when it runs (bench scripts
  import their sibling bench_util)."""
  import importlib.util
  path = os.path.join(REPO, relative_path)
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.path.insert(0, os.path.dirname(path))
  try:
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(os.path.dirname(path))
  return module


# --- The installed commands ---
def command(name):
  """The console script installed beside this interpreter (else on PATH, else the module).

  Beside sys.executable first: a PATH that puts another install first would
  otherwise test that install's code.
  """
  beside = os.path.join(os.path.dirname(sys.executable), name)
  path = beside if os.access(beside, os.X_OK) else shutil.which(name)
  module = "t2tlite.bin." + name.replace("-", "_")
  return [path] if path else [sys.executable, "-m", module]


def run(name, *args, check=True, timeout=600, env=None):
  """Runs command `name` with `args`; raises with its stderr if it fails and `check`."""
  proc = subprocess.run(command(name) + list(args), capture_output=True, text=True,
                        timeout=timeout,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})})
  if check and proc.returncode != 0:
    raise AssertionError(f"{name} {args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
  return proc


# Python's log of every module imported, with its time, on stderr (`python -X importtime`):
# run(..., env=IMPORT_LOG), then tensorflow_imported(proc) says whether TensorFlow loaded.
IMPORT_LOG = {"PYTHONPROFILEIMPORTTIME": "1"}


def tensorflow_imported(proc) -> bool:
  """Whether a command run with IMPORT_LOG imported TensorFlow (its lines name each module)."""
  return re.search(r"^import time: .*\|\s*tensorflow$", proc.stderr, re.M) is not None


def one_line_error(proc, *fragments):
  """The command failed as a user error: exit 2, one "error:" line holding every fragment."""
  assert proc.returncode == 2, proc.stderr[-2000:]
  errors = [l for l in proc.stderr.splitlines() if ": error: " in l]
  assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  for fragment in fragments:
    assert fragment in errors[0], errors[0]


def registry_sections(text):
  """--registry_help's text -> {heading: [entry names]}; an entry's name is its first word.

  Headings are unindented lines "kind (count):"; entries are the lines indented by
  two spaces below one (deeper lines, "alias NAME: ...", belong to the entry above).
  The count must be the number of entries listed.
  """
  sections, heading = {}, None
  for line in text.splitlines():
    if line and not line[0].isspace() and line.rstrip().endswith("):"):
      heading, count = line.rstrip()[:-2].rsplit(" (", 1)
      sections[heading] = []
      expected = int(count)
    elif heading and line.startswith("  ") and not line.startswith("   ") and line.strip():
      sections[heading].append(line.split()[0])
      assert len(sections[heading]) <= expected, line
  return sections


# --- Independent truths ---
# Every hparams set the paper's tables name, Table 3's rows in order.
TABLE3_SETS = [
    "transformer_base",
    "transformer_base_h1", "transformer_base_h4", "transformer_base_h16", "transformer_base_h32",
    "transformer_base_dk16", "transformer_base_dk32",
    "transformer_base_n2", "transformer_base_n4", "transformer_base_n8",
    "transformer_base_d256", "transformer_base_d1024",
    "transformer_base_ff1024", "transformer_base_ff4096",
    "transformer_base_drop0", "transformer_base_drop02",
    "transformer_base_ls0", "transformer_base_ls02",
    "transformer_base_posemb",
    "transformer_big",
]
ALL_SETS = TABLE3_SETS + ["transformer_big_enfr", "transformer_parsing", "transformer_tiny",
                          "transformer_base_prenorm", "transformer_multi30k_wide"]


def closed_form_params(hp, vocab):
  """Weights of the architecture in Section 3, with this implementation's choices:
  no biases in attention projections, biases in the FFN, LayerNorm gain and bias."""
  d, h, dk, dv, ff = hp.d_model, hp.num_heads, hp.key_dim, hp.value_dim, hp.d_ff
  attention = 2 * d * h * dk + d * h * dv + h * dv * d
  if hp.attention_use_bias:
    attention += 2 * h * dk + h * dv + d
  ffn = d * ff + ff + ff * d + d
  norm = 2 * d
  encoder_layer = attention + ffn + 2 * norm
  decoder_layer = 2 * attention + ffn + 3 * norm
  total = hp.num_encoder_layers * encoder_layer + hp.num_decoder_layers * decoder_layer
  total += vocab * d  # One shared embedding / softmax matrix (Section 3.4).
  if not hp.shared_source_target_embedding:
    total += vocab * d
  if not hp.shared_embedding_and_softmax_weights:
    total += d * vocab
  if hp.position_encoding == "learned":
    total += 2 * hp.max_position * d  # Source and target position tables.
  if hp.layer_norm_position == "pre":
    total += 2 * norm  # Final LayerNorm of each stack.
  return total


def paper_positional_encoding(length, d_model):
  """Section 3.5 written out literally, one entry at a time."""
  pe = np.zeros((length, d_model))
  for pos in range(length):
    for i in range(d_model // 2):
      pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d_model))
      pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d_model))
  return pe


def paper_table3(shared_dir):
  """Table 3's rows from PAPER_SPEC.md: (row, shape, figures, line), blank cells as in base.

  shape: N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls as printed (strings), blanks filled
  from the base row (row E's "positional embedding instead of sinusoids" has base sizes);
  figures: PPL, BLEU and params as floats, None where the paper leaves a cell blank.
  """
  text = open(os.path.join(shared_dir, "PAPER_SPEC.md"), encoding="utf-8").read()
  section = text.split("## Table 3")[1].split("\n## ")[0]
  rows = [line for line in section.splitlines() if re.match(r"\| (base|[A-E]|big) \|", line)]
  columns = ["N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls"]
  base, table = None, []
  for line in rows:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    figures = {k: (float(v) if v else None)
               for k, v in zip(("ppl", "bleu", "params"), cells[10:13])}
    if cells[0] == "E":
      cells = [cells[0]] + [""] * 8
    values = dict(zip(columns, cells[1:9]))
    if base is None:
      base = values
    table.append((cells[0], {k: (v if v else base[k]) for k, v in values.items()}, figures, line))
  return table


def _mixture(models, source, prefix):
  """log of the mean of the models' next-token probabilities after `prefix`, float64,
  from each model's whole teacher-forced forward pass (no cache, no search)."""
  from t2tlite.constants import EOS_ID
  features = {"inputs": np.array([list(source) + [EOS_ID]], np.int64),
              "targets": np.array([list(prefix) + [0]], np.int64)}
  probs = [_softmax(np.asarray(_whole_forward(model)(features), np.float64)[0, -1])
           for model in models]
  return np.log(np.mean(probs, axis=0))


_WHOLE_FORWARDS = {}  # id(model) -> (model, its traced forward pass); the model kept alive.


def _whole_forward(model):
  """`model(features, training=False)` for one sentence of any lengths, traced once per model:
  the same whole forward pass, without eager Keras's tenth of a second per call (greedy
  recomputation calls it once per prefix)."""
  import tensorflow as tf
  if id(model) not in _WHOLE_FORWARDS:
    spec = tf.TensorSpec([1, None], tf.int64)
    _WHOLE_FORWARDS[id(model)] = (model, tf.function(
        lambda features: model(features, training=False),
        input_signature=[{"inputs": spec, "targets": spec}]))
  return _WHOLE_FORWARDS[id(model)][1]


def _softmax(logits):
  shifted = np.exp(logits - logits.max())
  return shifted / shifted.sum()


def greedy_by_recomputation(models, source, extra_length):
  """(ids up to EOS, log P(Y|X) with EOS) of greedy search, step by step, with no cache and
  no search: the models' mixture (one model: that model) recomputed whole for every prefix.

  Every token the mixture prefers is taken, pad included (a model may rank it first; the
  decoder's output then ends there, constants.until_eos), until EOS, forced after
  len(source) + extra_length tokens as in search.py."""
  from t2tlite.constants import EOS_ID, until_eos
  ids, score = [], 0.0
  for _ in range(len(source) + extra_length):
    log_probs = _mixture(models, source, ids)
    token = int(np.argmax(log_probs))
    score += log_probs[token]
    if token == EOS_ID:
      return until_eos(ids), score
    ids.append(token)
  return until_eos(ids), score + _mixture(models, source, ids)[EOS_ID]


@functools.lru_cache(maxsize=1)
def sample_trees(shared_dir):
  """Every tree of NLTK's sample, file by file, as the treebank has them (read once; don't mutate)."""
  from t2tlite.data import trees
  path = os.path.join(shared_dir, "data", "ptb", "treebank.zip")
  with zipfile.ZipFile(path) as archive:
    names = sorted(n for n in archive.namelist() if n.startswith("treebank/combined/wsj_"))
    return [t for n in names for t in trees.read_trees(archive.read(n).decode(), n)]


BACKEND_WORKER = os.path.join(REPO, "tests", "backend_worker.py")


def backend_python(backend, *args, code=None):
  """stdout of tests/backend_worker.py (or of `code`) under KERAS_BACKEND=`backend`, on CPU."""
  # ONEDNN_DEFAULT_FPMATH_MODE=STRICT: float32 matmuls in float32 on every host; oneDNN may
  # otherwise compute them in bfloat16 on CPUs that have bf16 units (backend_worker.py).
  env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="",
             ONEDNN_DEFAULT_FPMATH_MODE="STRICT",
             PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
  argv = [sys.executable] + (["-c", code] if code else [BACKEND_WORKER]) + list(args)
  proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


def scalar_events(directory, tag):
  """[(step, value)] of every `tag` summary in the event files of `directory`, in file order."""
  import tensorflow as tf
  events = []
  for path in sorted(tf.io.gfile.glob(os.path.join(directory, "events.out.tfevents.*"))):
    events += [(e.step, float(tf.make_ndarray(v.tensor)))
               for e in tf.compat.v1.train.summary_iterator(path)
               for v in e.summary.value if v.tag == tag]
  return events
