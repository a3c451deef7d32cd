"""recipes/parsing_gpu.py end to end on this CPU: prepare (TensorFlow), run (JAX), report.

A one-layer width-32 model for three steps on the real PTB sample stands in for
transformer_parsing: what is checked is the path (numpy batches, the JAX
trainer, the constraint rebuilt from JSON, the JAX search, trees and EVALB back
here), and the constraint's promise: every tree is over the source's words in
order and none is repaired, however untrained the model.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                reason='jax is not installed (pip install -e ".[jax]")')
SCRIPT = os.path.join(REPO, "recipes", "parsing_gpu.py")
SMALL = "num_encoder_layers=1,num_decoder_layers=1,d_model=32,d_ff=64,num_heads=2"
LINES = 3


def _recipe(*args, backend="tensorflow"):
  env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  proc = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        env=env, cwd=REPO, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stderr


def _leaves(tree):
  """The words of a bracketed tree line: each `(TAG word)`'s word."""
  return [token.rstrip(")") for token in tree.split() if not token.startswith("(")]


# Slow-marked (four processes, 62 s alone, 77 s in CI's two-process run). CI covers its parts:
# the JAX trainer on saved numpy batches without TensorFlow (tests/test_jax_training.py), the
# JAX search under the word-tree constraint against TensorFlow's (tests/test_jax_search.py),
# and the TensorFlow parsing pipeline from datagen to EVALB (tests/test_parsing.py).
@pytest.mark.slow
def test_prepare_run_report_gives_unrepaired_trees_over_the_source_words(tmp_path, shared_dir):
  data, prep, results = (str(tmp_path / name) for name in ("data", "prep", "results"))
  _recipe("prepare", f"--data_dir={data}", f"--tmp_dir={os.path.join(shared_dir, 'data', 'ptb')}",
          f"--out={prep}", "--numpy_steps=3", "--hparams_set=transformer_parsing_tiny",
          f"--extra_hparams={SMALL}")
  with open(os.path.join(prep, "decode.json")) as f:
    prepared = json.load(f)
  assert "beam_size=21,alpha=0.3,extra_length=300,constrain_trees=true" in prepared["decode_hparams"]
  assert prepared["tree_constraint"]["target_words"] is True
  run = ["run", f"--prep={prep}", f"--out={results}", "--steps=3", "--save_steps=3",
         f"--lines={LINES}", "--decode_hparams=beam_size=2,extra_length=40",
         "--budget_seconds=300", "--decode_reserve_seconds=60"]
  _recipe(*run, backend="jax")
  with open(os.path.join(results, "result.json")) as f:
    result = json.load(f)
  assert result["steps"] == 3 and result["dev"]["lines"] == LINES
  # Resumable: a finished run trains and decodes nothing again.
  again = _recipe(*run, backend="jax")
  assert "training" not in again and "lines in" not in again
  _recipe("report", f"--prep={prep}", f"--results={results}", f"--data_dir={data}")
  for split in ("dev", "test"):
    with open(os.path.join(data, f"ptb_sample-{split}.inputs")) as f:
      sources = [line.split() for line in f][:LINES]
    with open(os.path.join(results, f"{split}.trees")) as f:
      trees = f.read().splitlines()
    assert [_leaves(t) for t in trees] == sources
    with open(os.path.join(results, f"{split}.evalb.json")) as f:
      scores = json.load(f)
    assert scores["repairs"].startswith(f"0 of {LINES} decoded trees repaired")
    assert 0.0 <= scores["parse_f1"] <= 100.0 and scores["lines"] == LINES
