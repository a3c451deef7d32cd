"""One markdown row per finished recipe run: what docs/results.md tabulates, read from the run.

  python bench/run_summary.py runs/multi30k_ende runs/multi30k_enfr runs/wmt_toy_ende

Each argument is a recipe's OUT_DIR (recipes/multi30k.sh, recipes/wmt_toy_ende.sh): OUT/train
is the t2t-trainer output_dir and OUT/*.bleu.json the t2t-bleu scores of the test decode. Read
back, never retyped: steps and wall time from the last checkpoint (its `seconds_trained`),
tokens/s from the train summaries (median of the logged windows, the first one left out: it
holds the traces), dev loss, perplexity and BLEU from the eval summaries, parameters from the
checkpoint's variables, test BLEU from the json. --json also writes everything as one file.
"""

import argparse
import glob
import json
import os
import statistics
import sys

import numpy as np
import tensorflow as tf

from t2tlite.training import curves, run_dir


def trainable_parameters(checkpoint: str) -> int:
  """Model weights in the checkpoint (not optimizer slots, counters or the data iterator)."""
  total = 0
  for name, shape in tf.train.list_variables(checkpoint):
    if name.startswith("model/") and "OPTIMIZER_SLOT" not in name and shape:
      total += int(np.prod(shape))
  return total


def summarize(out_dir: str) -> dict:
  train_dir = os.path.join(out_dir, "train")
  checkpoint = tf.train.latest_checkpoint(train_dir)
  if checkpoint is None:
    sys.exit(f"{train_dir}: no checkpoint (is {out_dir} a finished recipe run?)")
  run_info = run_dir.load_run_info(train_dir)
  hparams = run_dir.load_hparams(train_dir)
  scalars = curves.read_run(train_dir)
  train, dev = scalars["train"], scalars["eval"]
  windows = [v for _, v in train.get("tokens_per_sec", [])]
  windows = windows[1:] or windows
  dev_metric = "bleu" if "bleu" in dev else "exact_match"
  scores_files = sorted(glob.glob(os.path.join(out_dir, "*.bleu.json")))
  test = json.load(open(scores_files[0])) if scores_files else {}
  return {
      "run": out_dir,
      "problem": run_info["problem"],
      "hparams_set": run_info["hparams_set"],
      "hparams": run_info.get("hparams", ""),
      "parameters": trainable_parameters(checkpoint),
      "layers": f"{hparams.num_encoder_layers}+{hparams.num_decoder_layers}",
      "d_model": hparams.d_model, "d_ff": hparams.d_ff, "heads": hparams.num_heads,
      "dropout": hparams.dropout, "batch_size": hparams.batch_size,
      "steps": int(checkpoint.rsplit("-", 1)[1]),
      "train_seconds": float(tf.train.load_variable(
          checkpoint, "seconds_trained/.ATTRIBUTES/VARIABLE_VALUE")),
      "tokens_per_sec": statistics.median(windows) if windows else None,
      "dev_loss": dev["loss"][-1][1] if "loss" in dev else None,
      "dev_perplexity": dev["perplexity"][-1][1] if "perplexity" in dev else None,
      "dev_metric": dev_metric,
      "dev_last": dev[dev_metric][-1] if dev_metric in dev else None,
      "dev_best": max(dev[dev_metric], key=lambda sv: sv[1]) if dev_metric in dev else None,
      "test_lines": test.get("lines"),
      "test": {k: {"score": v["score"], "signature": v["signature"]}
               for k, v in test.items() if isinstance(v, dict) and "score" in v},
  }


def markdown_row(s: dict) -> str:
  minutes = s["train_seconds"] / 60
  test = s["test"]
  cell = lambda key: f'{test[key]["score"]:.2f}' if key in test else "-"  # noqa: E731
  dev_step, dev_score = s["dev_last"] or (0, float("nan"))
  tokens_per_sec = s["tokens_per_sec"] or float("nan")
  perplexity = s["dev_perplexity"] or float("nan")
  return (f'| {s["problem"]} | {s["hparams_set"]} ({s["hparams"] or "-"}) | '
          f'{s["parameters"] / 1e6:.2f}M | {s["steps"]} | {minutes:.1f} min | '
          f'{tokens_per_sec:,.0f} | {perplexity:.2f} | '
          f'{dev_score:.2f} @ {dev_step} | {cell("bleu")} | {cell("tokenized_bleu")} | '
          f'{cell("lowercased_tokenized_bleu")} |')


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("runs", nargs="+", help="recipe OUT_DIRs")
  parser.add_argument("--json", default="", help="also write every summary here")
  args = parser.parse_args()
  summaries = [summarize(run) for run in args.runs]
  print("| problem | hparams | params | steps | training | tgt tok/s | dev ppl | dev BLEU or "
        "exact match (last) | test sacreBLEU | test tok. BLEU | test lc tok. BLEU |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  for s in summaries:
    print(markdown_row(s))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(summaries, f, indent=1)


if __name__ == "__main__":
  main()
