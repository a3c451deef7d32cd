"""Parameter counts of the paper's sets, beside Table 3's "params x 10^6" column.

  python bench/param_counts.py [--vocab_size=37000]

Builds each registered set with the given shared vocabulary (the paper's
EN-DE BPE vocabulary has about 37000 tokens) and prints a markdown table.
The paper's counts are rounded to millions and its exact vocabulary size is
not stated, so differences of a couple of millions are the embedding term.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2tlite import registry  # noqa: E402
from t2tlite.models.transformer import Transformer  # noqa: E402

# Table 3 of Vaswani et al. 2017 ("params x 10^6"; None where the paper leaves it blank).
PAPER = [
    ("transformer_base", "base", 65), ("transformer_base_h1", "A h=1", None),
    ("transformer_base_h4", "A h=4", None), ("transformer_base_h16", "A h=16", None),
    ("transformer_base_h32", "A h=32", None), ("transformer_base_dk16", "B d_k=16", 58),
    ("transformer_base_dk32", "B d_k=32", 60), ("transformer_base_n2", "C N=2", 36),
    ("transformer_base_n4", "C N=4", 50), ("transformer_base_n8", "C N=8", 80),
    ("transformer_base_d256", "C d_model=256", 28), ("transformer_base_d1024", "C d_model=1024", 168),
    ("transformer_base_ff1024", "C d_ff=1024", 53), ("transformer_base_ff4096", "C d_ff=4096", 90),
    ("transformer_base_drop0", "D P_drop=0", None), ("transformer_base_drop02", "D P_drop=0.2", None),
    ("transformer_base_ls0", "D eps_ls=0", None), ("transformer_base_ls02", "D eps_ls=0.2", None),
    ("transformer_base_posemb", "E learned positions", None), ("transformer_big", "big", 213),
]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--vocab_size", type=int, default=37000)
  args = parser.parse_args()
  base = None
  print(f"| set | Table 3 row | paper (M) | ours (M) | ours exact | delta vs base |")
  print("|---|---|---|---|---|---|")
  for name, row, paper in PAPER:
    hp = registry.hparams(name).replace(input_vocab_size=args.vocab_size,
                                        target_vocab_size=args.vocab_size)
    count = Transformer(hp).count_params()
    base = count if base is None else base
    print(f"| `{name}` | {row} | {paper if paper else '-'} | {count / 1e6:.1f} | "
          f"{count:,} | {count - base:+,} |", flush=True)


if __name__ == "__main__":
  main()
