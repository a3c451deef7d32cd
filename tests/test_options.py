"""TrainOptions: one definition for the record and the t2t-trainer flags, checked in one place."""

import dataclasses

import pytest
from absl import flags

from t2tlite.errors import UserError
from t2tlite.training import options as options_lib
from t2tlite.training.options import TrainOptions, TrainOptionsError
from tests.helpers import IMPORT_LOG, one_line_error, run, tensorflow_imported


def _flags(*argv):
  flag_values = flags.FlagValues()
  options_lib.define_flags(flag_values)
  flag_values(["t2t-trainer", *argv])
  return flag_values


def test_every_field_is_a_flag_with_the_same_default():
  flag_values = _flags()
  for field in dataclasses.fields(TrainOptions):
    assert flag_values[field.name].default == field.default, field.name
    assert flag_values[field.name].help == field.metadata["help"], field.name
  assert options_lib.from_flags(flag_values) == TrainOptions()
  assert TrainOptions().train_steps == 100000  # The paper's base run, for the command and the library.


def test_flags_set_the_fields():
  got = options_lib.from_flags(_flags("--train_steps=7", "--noeval_decode",
                                      "--eval_decode_hparams=beam_size=1", "--overwrite_run"))
  assert got == TrainOptions(train_steps=7, eval_decode=False, eval_decode_hparams="beam_size=1",
                             overwrite_run=True)


@pytest.mark.parametrize("name,low", sorted(options_lib._AT_LEAST.items()))
def test_each_range_is_checked_for_library_callers_too(name, low):
  TrainOptions(**{name: low})  # The bound itself is allowed.
  with pytest.raises(TrainOptionsError, match=rf"^--{name}={low - 1}: must be >= {low}"):
    TrainOptions(**{name: low - 1})
  assert issubclass(TrainOptionsError, UserError)


def test_trainer_refuses_a_bad_option_in_one_line_before_tensorflow(tmp_path):
  proc = run("t2t-trainer", "--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
             f"--output_dir={tmp_path / 'run'}", "--average_last_n=-1", check=False,
             env=IMPORT_LOG)
  one_line_error(proc, "--average_last_n=-1", ">= 0")
  assert not tensorflow_imported(proc)
  assert not (tmp_path / "run").exists()


def test_trainer_help_lists_the_options_with_their_help():
  out = " ".join(run("t2t-trainer", "--help", check=False).stdout.split())  # absl wraps help.
  for field in dataclasses.fields(TrainOptions):
    flag = f"--[no]{field.name}" if field.type is bool else f"--{field.name}"
    assert f"{flag}: {field.metadata['help']}" in out, field.name
