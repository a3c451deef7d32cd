"""Numbers every stage must agree on, defined once.

Ids 0 and 1 are reserved in every vocabulary: 0 pads batches and starts every
target (the decoder's start symbol, as in tensor2tensor), 1 ends every
sequence. NEG_INF is the finite "minus infinity" added to masked attention
logits (Section 3.2.3) and stored for impossible hypotheses in beam search:
finite, so that it never turns into NaN, and only ever met in float32.
"""

from typing import Iterable, List

PAD_ID = 0
EOS_ID = 1
NEG_INF = -1e9


def until_eos(ids: Iterable[int]) -> List[int]:
  """The ids before the first EOS (or PAD, which is never a real token), as Python ints.

  The one rule for where an id sequence ends: search output rows are padded
  with 0 after their EOS, dataset rows end in EOS.
  """
  out = []
  for token in ids:
    token = int(token)
    if token == EOS_ID or token == PAD_ID:
      break
    out.append(token)
  return out
