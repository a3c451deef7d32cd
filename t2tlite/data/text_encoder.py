"""Text <-> id encoders. Ids 0 and 1 are reserved for padding and EOS everywhere.

A problem owns one encoder per side; the trainer and the decoder reach text
only through them, so a problem can swap in another vocabulary (word pieces,
characters, symbols) without touching the model.
"""

from typing import Iterable, List, Sequence

from t2tlite.constants import EOS_ID, PAD_ID, until_eos  # noqa: F401 (re-exported)

PAD = "<pad>"
EOS = "<EOS>"
NUM_RESERVED = 2


class TextEncoder:
  """Interface: encode a line to ids (no EOS) and decode ids back to a line."""

  @property
  def vocab_size(self) -> int:
    raise NotImplementedError

  def encode(self, text: str) -> List[int]:
    raise NotImplementedError

  def decode(self, ids: Iterable[int]) -> str:
    raise NotImplementedError


class TokenEncoder(TextEncoder):
  """Whitespace-separated tokens from a fixed list; ids start after the reserved two."""

  def __init__(self, tokens: Sequence[str]):
    self.tokens = [PAD, EOS] + list(tokens)
    self._ids = {tok: i for i, tok in enumerate(self.tokens)}
    if len(self._ids) != len(self.tokens):
      raise ValueError("TokenEncoder: duplicate tokens in the vocabulary")

  @property
  def vocab_size(self) -> int:
    return len(self.tokens)

  def encode(self, text: str) -> List[int]:
    ids = []
    for tok in text.split():
      if tok not in self._ids or self._ids[tok] < NUM_RESERVED:
        raise ValueError(f"token {tok!r} is not in the vocabulary "
                         f"({' '.join(self.tokens[NUM_RESERVED:][:20])})")
      ids.append(self._ids[tok])
    return ids

  def decode(self, ids: Iterable[int]) -> str:
    return " ".join(self.tokens[i] for i in until_eos(ids) if i < len(self.tokens))
