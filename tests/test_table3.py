"""Table 3 in miniature (hparams/table3.py): every row keeps the paper's ratios to base.

The paper's side is read from the full-size registered sets (checked against
PAPER_SPEC.md in test_hparams.py) and the paper's figures from PAPER_SPEC.md
itself; parameter counts against the closed-form count of tests/helpers.py.
"""

from fractions import Fraction

import pytest

from t2tlite import describe, registry
from t2tlite.hparams import table3
from t2tlite.hparams_record import HParamsError
from t2tlite.models.transformer import Transformer
from tests.helpers import TABLE3_SETS, closed_form_params, paper_table3

VOCAB = 1000
ROWS = [pytest.param(r, id=r.mini_set) for r in table3.TABLE3]
# Size columns, read through the properties that resolve d_k = d_v = 0 to d_model / h.
SIZES = ("num_encoder_layers", "num_decoder_layers", "d_model", "d_ff", "num_heads", "key_dim",
         "value_dim")
VALUES = ("dropout", "label_smoothing", "position_encoding")  # Taken over as the paper's.


def test_one_row_per_paper_row_in_the_papers_order(shared_dir):
  assert [r.paper_set for r in table3.TABLE3] == TABLE3_SETS
  paper = paper_table3(shared_dir)
  assert [r.row for r in table3.TABLE3] == [row for row, _, _, _ in paper]
  for ours, (_, _, figures, line) in zip(table3.TABLE3, paper):
    assert (ours.ppl, ours.bleu, ours.params_m) == (
        figures["ppl"], figures["bleu"], figures["params"]), line
    assert ours.steps == (300_000 if "300K" in line else 100_000), line


@pytest.mark.parametrize("row", ROWS)
def test_miniature_keeps_the_papers_ratios_to_base(row):
  paper, paper_base = registry.hparams(row.paper_set), registry.hparams("transformer_base")
  mini, mini_base = registry.hparams(row.mini_set), registry.hparams("transformer_table3_base")
  for size in SIZES:
    assert (Fraction(getattr(mini, size), getattr(mini_base, size)) ==
            Fraction(getattr(paper, size), getattr(paper_base, size))), size
  for name in VALUES:
    want = getattr(paper, name) if getattr(paper, name) != getattr(paper_base, name) \
        else getattr(mini_base, name)
    assert getattr(mini, name) == want, name
  # Nothing else differs from the miniature base (batches, warmup, learning rate...).
  others = set(mini.to_dict()) - set(SIZES) - set(VALUES) - {"d_k", "d_v"}
  assert {k: getattr(mini, k) for k in others} == {k: getattr(mini_base, k) for k in others}


def test_the_miniature_base_is_multi30k_training_at_a_quarter_width_half_depth():
  base, multi30k = registry.hparams("transformer_table3_base"), registry.hparams(
      "transformer_multi30k")
  assert (base.num_encoder_layers, base.num_decoder_layers, base.d_model, base.d_ff,
          base.num_heads, base.key_dim, base.value_dim) == (3, 3, 128, 512, 8, 16, 16)
  for name in ("batch_size", "learning_rate_warmup_steps", "learning_rate_constant", "dropout",
               "label_smoothing", "layer_norm_position"):
    assert getattr(base, name) == getattr(multi30k, name), name


def test_no_row_collapses_onto_another():
  shapes = {}
  for row in table3.TABLE3:
    hp = registry.hparams(row.mini_set)
    shapes.setdefault(tuple(sorted(hp.to_dict().items())) + (row.steps,), []).append(row.mini_set)
  assert [names for names in shapes.values() if len(names) > 1] == []


def _architectures():
  """One row per distinct architecture: rows that change only P_drop or eps_ls share base's."""
  seen = {}
  for row in table3.TABLE3:
    hp = registry.hparams(row.mini_set).replace(dropout=0.0, label_smoothing=0.0)
    seen.setdefault(hp, row.mini_set)
  return list(seen.values())


@pytest.mark.parametrize("name", _architectures())
def test_parameter_count_is_the_closed_form(name):
  hp = registry.hparams(name).replace(input_vocab_size=VOCAB, target_vocab_size=VOCAB)
  assert Transformer(hp).count_params() == closed_form_params(hp, VOCAB)


def test_a_ratio_that_needs_a_fraction_is_refused():
  paper_base = registry.hparams("transformer_base")
  with pytest.raises(HParamsError, match="num_encoder_layers: 5 x 3 / 6 is not a whole number"):
    table3.miniature(paper_base.replace(num_encoder_layers=5), paper_base, table3.mini_base())


def test_registry_help_lists_every_miniature_with_its_shape():
  text = describe.registry_help()
  for row in table3.TABLE3:
    hp = registry.hparams(row.mini_set)
    line = next(l for l in text.splitlines() if l.split() and l.split()[0] == row.mini_set)
    assert f"N={hp.num_encoder_layers}, d_model={hp.d_model}" in line
    assert f"d_k={hp.key_dim}, d_v={hp.value_dim}" in line
