"""Batched file decoding: input order, batch independence, length limits, empty lines."""

import keras
import numpy as np
import pytest

from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.decoding.decoder import Decoder
from t2tlite.models.transformer import Transformer
from t2tlite.overrides import OverrideError
from tests.conftest import tiny_hparams


@pytest.fixture(scope="module")
def model():
  keras.utils.set_random_seed(3)
  return Transformer(tiny_hparams(xla=False))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_outputs_come_back_in_input_order_and_match_one_by_one(model, beam_size):
  rng = np.random.RandomState(0)
  sources = [list(rng.randint(2, 20, size=n)) for n in (9, 2, 14, 5, 1, 11, 3)]
  hp = DecodeHParams(beam_size=beam_size, extra_length=4, batch_size=3)
  batched = Decoder(model, hp).decode_ids(sources)
  single = Decoder(model, hp.override("batch_size=1"))
  for source, output in zip(sources, batched):
    assert output == single.decode_ids([source])[0]
    assert len(output) <= len(source) + 4  # Maximum output length = input length + extra.


def test_empty_sources_give_empty_outputs_in_place(model):
  out = Decoder(model, DecodeHParams(beam_size=2, extra_length=3)).decode_ids([[5, 6], [], [7]])
  assert out[1] == [] and len(out) == 3


def test_decode_hparams_defaults_are_the_papers():
  hp = DecodeHParams()
  assert (hp.beam_size, hp.alpha, hp.extra_length) == (4, 0.6, 50)
  assert hp.override("beam_size=8,alpha=1.0").beam_size == 8
  with pytest.raises(OverrideError, match="--decode_hparams: unknown key 'beam'"):
    hp.override("beam=2")
  with pytest.raises(OverrideError, match="beam_size=0 must be >= 1"):
    hp.override("beam_size=0")
