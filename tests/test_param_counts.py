"""Parameter counts of every Table 3 set against a closed-form count written out here."""

import functools

import pytest

from t2tlite import registry
from t2tlite.models.transformer import Transformer
from tests.test_hparams import ALL_SETS, TABLE3_SETS

VOCAB = 1000  # Small, so building all sets stays fast; the embedding term is V * d_model.


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
