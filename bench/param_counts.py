"""Parameter counts of the paper's sets, beside Table 3's "params x 10^6" column.

  python bench/param_counts.py [--vocab_size=37000]
  python bench/param_counts.py --miniature     # the Table 3 miniatures, at Multi30k's 8000

Builds each registered set with the given shared vocabulary (the paper's
EN-DE BPE vocabulary has about 37000 tokens) and prints a markdown table.
The paper's counts are rounded to millions and its exact vocabulary size is
not stated, so differences of a couple of millions are the embedding term.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2tlite import registry  # noqa: E402
from t2tlite.hparams.table3 import TABLE3  # noqa: E402  (the paper's rows and counts, once)
from t2tlite.models.transformer import Transformer  # noqa: E402

COLUMNS = (("N", "num_encoder_layers"), ("d_model", "d_model"), ("d_ff", "d_ff"),
           ("h", "num_heads"), ("d_k", "key_dim"), ("d_v", "value_dim"), ("P_drop", "dropout"),
           ("eps_ls", "label_smoothing"), ("positions", "position_encoding"))


def row_label(row, hp, base) -> str:
  """"A h=1, d_k=512, d_v=512": Table 3's row letter and what the set changes from its base."""
  if row.row in ("base", "big"):
    return row.row
  changes = [f"{col}={getattr(hp, field)}" for col, field in COLUMNS
             if getattr(hp, field) != getattr(base, field)]
  return f"{row.row} {', '.join(changes)}"


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--vocab_size", type=int, default=None,
                      help="Shared vocabulary size (default 37000; 8000 with --miniature).")
  parser.add_argument("--miniature", action="store_true",
                      help="The Table 3 miniatures (hparams/table3.py) instead of the full sets.")
  args = parser.parse_args()
  vocab = args.vocab_size or (8000 if args.miniature else 37000)
  digits = 2 if args.miniature else 1
  base = None
  print(f"| set | Table 3 row | paper (M) | ours (M) | ours exact | delta vs base |")
  print("|---|---|---|---|---|---|")
  for row in TABLE3:
    name = row.mini_set if args.miniature else row.paper_set
    hp = registry.hparams(name).replace(input_vocab_size=vocab, target_vocab_size=vocab)
    label = row_label(row, hp, registry.hparams(TABLE3[0].mini_set if args.miniature
                                                else TABLE3[0].paper_set))
    count = Transformer(hp).count_params()
    base = count if base is None else base
    print(f"| `{name}` | {label} | {row.params_m or '-'} | {count / 1e6:.{digits}f} | "
          f"{count:,} | {count - base:+,} |", flush=True)


if __name__ == "__main__":
  main()
