"""Parameter counts of every Table 3 set against a closed-form count written out here."""

import functools

import pytest

from t2tlite import registry
from t2tlite.models.transformer import Transformer
from tests.helpers import ALL_SETS, TABLE3_SETS, closed_form_params

VOCAB = 1000  # Small, so building all sets stays fast; the embedding term is V * d_model.


@functools.lru_cache(maxsize=None)
def _count(hp):
  return Transformer(hp).count_params()


class _Counted:
  """What the tests need of a built model; building the big sets once keeps this file fast."""

  def __init__(self, hp):
    self.hp = hp

  def count_params(self):
    return _count(self.hp)


def build(name, vocab=VOCAB, **changes):
  hp = registry.hparams(name).replace(input_vocab_size=vocab, target_vocab_size=vocab, **changes)
  return hp, _Counted(hp)


@pytest.mark.parametrize("name", ALL_SETS)
def test_model_count_equals_closed_form(name):
  hp, model = build(name)
  assert model.count_params() == closed_form_params(hp, VOCAB)


def test_table3_deltas_against_base():
  base_hp, base = build("transformer_base")
  for name in TABLE3_SETS[1:]:
    hp, model = build(name)
    assert (model.count_params() - base.count_params() ==
            closed_form_params(hp, VOCAB) - closed_form_params(base_hp, VOCAB)), name


def test_row_a_keeps_computation_constant_and_row_d_changes_nothing():
  """Row A varies h at constant h * d_k, so the count is unchanged; rows D and E don't add weights."""
  _, base = build("transformer_base")
  for name in ("transformer_base_h1", "transformer_base_h4", "transformer_base_h16",
               "transformer_base_h32", "transformer_base_drop0", "transformer_base_drop02",
               "transformer_base_ls0", "transformer_base_ls02"):
    assert build(name)[1].count_params() == base.count_params(), name


def test_option_deltas():
  hp, base = build("transformer_tiny")
  d = hp.d_model
  assert build("transformer_tiny", attention_use_bias=True)[1].count_params() - base.count_params() \
      == (hp.num_encoder_layers + 2 * hp.num_decoder_layers) * (2 * d + d + d)
  assert build("transformer_tiny", shared_embedding_and_softmax_weights=False)[1].count_params() \
      - base.count_params() == d * VOCAB
