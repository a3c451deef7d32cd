"""Decoding settings (`--decode_hparams`): the paper's Section 6.1 by default."""

import dataclasses

from t2tlite import overrides


@dataclasses.dataclass(frozen=True)
class DecodeHParams:
  beam_size: int = 4  # Beams per sentence; 1 decodes greedily.
  alpha: float = 0.6  # GNMT length-penalty exponent: score = log P / ((5 + |Y|) / 6)^alpha.
  extra_length: int = 50  # Maximum output length = input length + extra_length.
  batch_size: int = 64  # Sentences decoded together (sorted by length first).
  length_multiple: int = 8  # Source lengths are padded to a multiple of this, bounding recompilation.

  def __post_init__(self):
    for name in ("beam_size", "batch_size", "length_multiple"):
      if getattr(self, name) < 1:
        raise overrides.OverrideError(f"--decode_hparams: {name}={getattr(self, name)} must be >= 1")
    if self.extra_length < 0:
      raise overrides.OverrideError(
          f"--decode_hparams: extra_length={self.extra_length} must be >= 0")

  def override(self, text: str, flag: str = "--decode_hparams") -> "DecodeHParams":
    return overrides.apply_overrides(self, text, flag)
