"""XLA's backend optimization level, as the decode hparam `xla_opt_level` asks for it.

The truth is XLA's own: with --xla_dump_to it writes, beside each compiled
program, the debug options the program was compiled with.
"""

import os
import re
import subprocess
import sys

import pytest

from t2tlite import overrides, registry
from t2tlite.decoding.decode_hparams import DecodeHParams

# Asks for a level after TensorFlow has loaded and listed its devices (as t2t-decoder does,
# before its model loads), then compiles one small program.
COMPILE_ONE = """
import sys
import tensorflow as tf
from t2tlite import xla_choice
tf.config.list_physical_devices()
xla_choice.request_backend_level(int(sys.argv[1]))
tf.function(lambda x: tf.reduce_sum(tf.tanh(x), axis=1), jit_compile=True)(tf.ones([4, 8])).numpy()
"""


def _compiled_level(dump_dir, requested, user_flags=""):
  env = dict(os.environ, XLA_FLAGS=f"{user_flags} --xla_dump_to={dump_dir}".strip())
  subprocess.run([sys.executable, "-c", COMPILE_ONE, str(requested)], env=env, check=True,
                 capture_output=True, text=True, timeout=300)
  # The dump names only the options that differ from XLA's defaults (level 3 among them).
  [options] = dump_dir.glob("*.debug_options")  # One program compiled, one file.
  found = re.findall(r"xla_backend_optimization_level: (\d+)", options.read_text())
  return int(found[0]) if found else 3


def test_the_level_asked_for_is_the_level_xla_compiles_at(tmp_path):
  assert _compiled_level(tmp_path / "default", 0) == 3  # 0 leaves XLA's default.
  assert _compiled_level(tmp_path / "asked", 1) == 1


def test_a_level_the_user_set_in_xla_flags_wins(tmp_path):
  assert _compiled_level(tmp_path / "user", 1, "--xla_backend_optimization_level=2") == 2


def test_parsing_asks_for_level_1_and_translation_for_xlas_default():
  def level(problem):
    return DecodeHParams().override(registry.problem(problem).default_decode_hparams).xla_opt_level
  assert level("ptb_sample") == 1
  assert level("multi30k_ende") == 0  # Level 1 ran a mixed_bfloat16 translation search slower.
  with pytest.raises(overrides.OverrideError, match="xla_opt_level=4"):
    DecodeHParams().override("xla_opt_level=4")
