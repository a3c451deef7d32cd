"""Table 3 of Vaswani et al. 2017 once in code: each row's set, its miniature, its figures.

`TABLE3` lists the paper's rows in the paper's order. Each row names the
full-size registered set (`transformer_base_h1`, ... in transformer.py), the
miniature registered here (`transformer_table3_h1`, ...), and what the paper
reported for it (dev PPL, dev BLEU, params x 10^6, train steps), so the
report, bench/param_counts.py and the tests read the paper's numbers from one
place.

The rule that makes every miniature (`miniature`): a miniature row stands to
the miniature base as the paper's row stands to the paper's base.
- Sizes (N, d_model, d_ff, h, d_k, d_v) the paper's row changes are multiplied
  by the miniature base's ratio to the paper's base for that size:
  mini_row = paper_row x mini_base / paper_base, so mini_row / mini_base =
  paper_row / paper_base exactly. d_k and d_v follow the paper: derived as
  d_model / h where the paper's set derives them, scaled where it sets them.
- Other values the paper's row changes (P_drop, eps_ls, learned positions)
  take the paper's value itself.
- Everything the paper's row leaves at base takes the miniature base's value.
- Train steps: rows train for the sweep's steps x the paper's steps / 100K,
  i.e. all rows equal, except big (300K: 3x; see `steps_ratio`).

The miniature base (`transformer_table3_base`) is `transformer_multi30k`
(docs/results.md: its batches, warmup and learning rate, measured on
Multi30k) with N=3 and h=8: N=3 is the paper's 6 halved, so rows C's
N=2/4/8 become 1/2/4; widths are the paper's quartered (d_model 128, d_ff
512, d_k = d_v = 16); h=8 as in the paper, so row A's h=32 still divides
d_model (d_k = 128 / 32 = 4). With this base every ratio of every row is kept
exactly, with integer sizes; `miniature` raises if a row ever needs a
fraction, rather than rounding silently. What cannot be kept is the scale
around the shapes: Multi30k (29k pairs) for WMT (4.5M), 2048-token batches
for ~25000, about a thousand steps for 100K (the sweep's TABLE3_STEPS), an
8000-piece vocabulary for ~37000. The learned position table of row E keeps
the default 1024 rows (2 x 1024 x 128 weights, 10% of the miniature; the
paper gives no count for that row).
"""

import dataclasses
from typing import NamedTuple, Optional

from t2tlite.hparams import transformer as full_size
from t2tlite.hparams_record import HParams, HParamsError
from t2tlite.registry import register_hparams

# The paper's size columns, as HParams fields; d_k / d_v are handled apart (0 = d_model / h).
SIZE_FIELDS = ("num_encoder_layers", "num_decoder_layers", "d_model", "d_ff", "num_heads")
HEAD_DIM_FIELDS = {"d_k": "key_dim", "d_v": "value_dim"}  # Field -> the property that resolves 0.
PAPER_BASE_STEPS = 100_000  # Table 3: every row but big trained for 100K steps.


class Table3Row(NamedTuple):
  """One row of the paper's Table 3 and its miniature."""
  row: str  # Table 3's row letter: "base", "A".."E", "big".
  paper_set: str  # The full-size registered set (transformer.py).
  mini_set: str  # Its miniature, registered here.
  ppl: float  # Paper: PPL (dev), per word-piece, newstest2013.
  bleu: float  # Paper: BLEU (dev), newstest2013.
  params_m: Optional[int]  # Paper: params x 10^6 (None where the paper leaves it blank).
  steps: int = PAPER_BASE_STEPS  # Paper: train steps.


# Table 3 of Vaswani et al. 2017 (../shared/PAPER_SPEC.md), in the paper's order.
TABLE3 = (
    Table3Row("base", "transformer_base", "transformer_table3_base", 4.92, 25.8, 65),
    Table3Row("A", "transformer_base_h1", "transformer_table3_h1", 5.29, 24.9, None),
    Table3Row("A", "transformer_base_h4", "transformer_table3_h4", 5.00, 25.5, None),
    Table3Row("A", "transformer_base_h16", "transformer_table3_h16", 4.91, 25.8, None),
    Table3Row("A", "transformer_base_h32", "transformer_table3_h32", 5.01, 25.4, None),
    Table3Row("B", "transformer_base_dk16", "transformer_table3_dk16", 5.16, 25.1, 58),
    Table3Row("B", "transformer_base_dk32", "transformer_table3_dk32", 5.01, 25.4, 60),
    Table3Row("C", "transformer_base_n2", "transformer_table3_n2", 6.11, 23.7, 36),
    Table3Row("C", "transformer_base_n4", "transformer_table3_n4", 5.19, 25.3, 50),
    Table3Row("C", "transformer_base_n8", "transformer_table3_n8", 4.88, 25.5, 80),
    Table3Row("C", "transformer_base_d256", "transformer_table3_d256", 5.75, 24.5, 28),
    Table3Row("C", "transformer_base_d1024", "transformer_table3_d1024", 4.66, 26.0, 168),
    Table3Row("C", "transformer_base_ff1024", "transformer_table3_ff1024", 5.12, 25.4, 53),
    Table3Row("C", "transformer_base_ff4096", "transformer_table3_ff4096", 4.75, 26.2, 90),
    Table3Row("D", "transformer_base_drop0", "transformer_table3_drop0", 5.77, 24.6, None),
    Table3Row("D", "transformer_base_drop02", "transformer_table3_drop02", 4.95, 25.5, None),
    Table3Row("D", "transformer_base_ls0", "transformer_table3_ls0", 4.67, 25.3, None),
    Table3Row("D", "transformer_base_ls02", "transformer_table3_ls02", 5.47, 25.7, None),
    Table3Row("E", "transformer_base_posemb", "transformer_table3_posemb", 4.92, 25.7, None),
    Table3Row("big", "transformer_big", "transformer_table3_big", 4.33, 26.4, 213, 300_000),
)
BY_MINI_SET = {r.mini_set: r for r in TABLE3}


def mini_base() -> HParams:
  """The miniature base: transformer_multi30k's training with N=3, h=8 (shape in the module doc)."""
  return full_size.transformer_multi30k().replace(
      num_encoder_layers=3, num_decoder_layers=3, num_heads=8)


def miniature(paper_row: HParams, paper_base: HParams, base: HParams) -> HParams:
  """The miniature of `paper_row`: the module doc's rule, applied field by field.

  Raises HParamsError when a scaled size is not a whole number (the rule
  would need rounding, which would change the ratio).
  """
  changes = {}
  for field in dataclasses.fields(HParams):
    name = field.name
    paper, paper_at_base = getattr(paper_row, name), getattr(paper_base, name)
    if paper == paper_at_base:
      continue  # Unchanged in the paper's row: the miniature base's value.
    if name in SIZE_FIELDS:
      changes[name] = _scaled(name, paper, paper_at_base, getattr(base, name))
    elif name in HEAD_DIM_FIELDS:
      prop = HEAD_DIM_FIELDS[name]
      changes[name] = _scaled(name, getattr(paper_row, prop), getattr(paper_base, prop),
                              getattr(base, prop)) if paper else 0
    else:
      changes[name] = paper  # P_drop, eps_ls, position encoding: the paper's value.
  return base.replace(**changes)


def _scaled(name: str, paper: int, paper_base: int, base: int) -> int:
  if (paper * base) % paper_base:
    raise HParamsError(f"{name}: {paper} x {base} / {paper_base} is not a whole number; "
                       "the miniature base cannot keep this Table 3 ratio")
  return paper * base // paper_base


def steps_ratio(row: Table3Row) -> float:
  """The row's train steps over the base's (1 for every row but big's 300K)."""
  return row.steps / PAPER_BASE_STEPS


def _make_set(row: Table3Row):
  """The registered function of one miniature row (its docstring is --registry_help's line)."""

  def hparams_set() -> HParams:
    return miniature(getattr(full_size, row.paper_set)(), full_size.transformer_base(),
                     mini_base())

  hparams_set.__name__ = row.mini_set
  hp = hparams_set()
  what = {"base": "the miniature base", "big": "Table 3's big model in miniature"}.get(
      row.row, f"Table 3 row ({row.row}) in miniature")
  hparams_set.__doc__ = (
      f"{what} ({row.paper_set}): N={hp.num_encoder_layers}, d_model={hp.d_model}, "
      f"d_ff={hp.d_ff}, h={hp.num_heads}, d_k={hp.key_dim}, d_v={hp.value_dim}, "
      f"P_drop={hp.dropout}, eps_ls={hp.label_smoothing}"
      + (", learned positions" if hp.position_encoding == "learned" else "")
      + ". Rule: hparams/table3.py.")
  return register_hparams(row.mini_set)(hparams_set)


for _row in TABLE3:
  _make_set(_row)
