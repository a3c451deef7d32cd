"""HParams: typed overrides, validation, persistence, and every set against the paper's tables."""

import os

import pytest

from t2tlite import registry
from t2tlite.hparams_record import HParams, HParamsError
from t2tlite.overrides import OverrideError
from tests.helpers import ALL_SETS, TABLE3_SETS, paper_table3



def test_every_required_set_is_registered_under_its_exact_name():
  registry.load_all()
  assert set(ALL_SETS) <= set(registry.HPARAMS.names())


def test_base_is_the_paper_base_model():
  hp = registry.hparams("transformer_base")
  assert (hp.num_encoder_layers, hp.num_decoder_layers, hp.d_model, hp.d_ff, hp.num_heads,
          hp.key_dim, hp.value_dim) == (6, 6, 512, 2048, 8, 64, 64)
  assert (hp.dropout, hp.label_smoothing) == (0.1, 0.1)
  assert (hp.adam_beta1, hp.adam_beta2, hp.adam_epsilon) == (0.9, 0.98, 1e-9)
  assert (hp.learning_rate_schedule, hp.learning_rate_warmup_steps,
          hp.learning_rate_constant) == ("noam", 4000, 1.0)
  assert hp.layer_norm_position == "post" and hp.position_encoding == "sinusoid"
  assert hp.shared_embedding_and_softmax_weights and hp.shared_source_target_embedding


def test_table3_sets_match_paper_rows(shared_dir):
  table = paper_table3(shared_dir)
  assert len(table) == len(TABLE3_SETS)
  for name, (row, want, _, line) in zip(TABLE3_SETS, table):
    hp = registry.hparams(name)
    want = dict(want)
    if row == "big":  # Its d_k/d_v cells are blank: d_model / h = 1024 / 16 = 64.
      want["d_k"] = want["d_v"] = "64"
    got = {"N": hp.num_encoder_layers, "d_model": hp.d_model, "d_ff": hp.d_ff, "h": hp.num_heads,
           "d_k": hp.key_dim, "d_v": hp.value_dim, "P_drop": hp.dropout,
           "eps_ls": hp.label_smoothing}
    for key, value in want.items():
      assert float(got[key]) == float(value), f"{name} {key}: {got[key]} vs paper {line}"
    assert hp.num_decoder_layers == hp.num_encoder_layers
    assert hp.position_encoding == ("learned" if row == "E" else "sinusoid"), name


def test_other_paper_sets():
  assert registry.hparams("transformer_big_enfr").dropout == 0.1
  assert registry.hparams("transformer_big").dropout == 0.3
  parsing = registry.hparams("transformer_parsing")
  assert (parsing.num_encoder_layers, parsing.num_decoder_layers, parsing.d_model) == (4, 4, 1024)
  assert parsing.d_ff == 2048 and parsing.dropout == 0.1  # Other values from base.
  prenorm = registry.hparams("transformer_base_prenorm")
  assert prenorm.layer_norm_position == "pre"


def test_overrides_are_typed():
  hp = registry.hparams("transformer_base").override(
      "num_heads=16, dropout=0.2,xla=false,position_encoding=learned")
  assert (hp.num_heads, hp.dropout, hp.xla, hp.position_encoding) == (16, 0.2, "false", "learned")
  assert isinstance(hp.dropout, float) and isinstance(hp.num_heads, int)


@pytest.mark.parametrize("text,message", [
    ("num_head=16", "unknown key 'num_head'; did you mean num_heads"),
    ("num_heads=16.5", "num_heads='16.5' is not a valid int"),
    ("attention_use_bias=maybe", "attention_use_bias='maybe' is not a valid bool"),
    ("xla=maybe", "xla='maybe' must be one of auto, true, false"),
    ("dropout=abc", "dropout='abc' is not a valid float"),
    ("dropout", "expected key=value"),
    ("dropout=1.5", "dropout=1.5 must be in [0, 1)"),
    ("layer_norm_position=middle", "must be one of post, pre"),
    ("num_heads=7", "num_heads=7 does not divide d_model=512"),
])
def test_bad_overrides_are_one_line_errors(text, message):
  with pytest.raises((OverrideError, HParamsError)) as error:
    registry.hparams("transformer_base").override(text)
  assert message in str(error.value) and "\n" not in str(error.value)
  assert str(error.value).startswith("--hparams:")


def test_explicit_head_dims_allow_any_head_count():
  hp = registry.hparams("transformer_base").override("num_heads=7,d_k=64,d_v=32")
  assert (hp.key_dim, hp.value_dim) == (64, 32)


def test_save_and_load_round_trip(tmp_path):
  hp = registry.hparams("transformer_big").replace(input_vocab_size=100, target_vocab_size=100)
  path = str(tmp_path / "hparams.json")
  hp.save(path)
  assert HParams.load(path) == hp
  assert not os.path.exists(path + ".incomplete")


def test_load_rejects_unknown_and_mistyped_fields(tmp_path):
  path = tmp_path / "hparams.json"
  path.write_text('{"d_model": 512, "nope": 1}')
  with pytest.raises(OverrideError, match="unknown keys"):
    HParams.load(str(path))
  path.write_text('{"d_model": "big"}')
  with pytest.raises(OverrideError, match="d_model='big' is not a int"):
    HParams.load(str(path))


def test_every_field_has_a_comment():
  import inspect
  source = inspect.getsource(inspect.getmodule(HParams))
  import dataclasses
  for field in dataclasses.fields(HParams):
    line = next(l for l in source.splitlines() if l.strip().startswith(f"{field.name}:"))
    assert "#" in line, f"field {field.name} has no comment"
