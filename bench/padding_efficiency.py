"""Padding efficiency of t2tlite's token-budget batching on real translation data.

Why
---
t2tlite batches as tensor2tensor does: examples are bucketed by the longer of their two sides,
and both sides of a batch are padded to that bucket's boundary (one static shape per bucket).
Every padded position costs compute and carries no signal, so the share of real tokens says how
much of a training step is useful work. This script measures it on the real pipeline.

What is measured
----------------
Padding efficiency = real tokens / all tokens, over both sides:

    sum over examples of (len(inputs) + len(targets))    (unpadded, EOS included)
  / sum over batches of rows x (padded inputs length + padded targets length)

for the batches of `t2tlite.training.input_pipeline`:

  * train: `training_dataset(dataset, hparams, seed=--seed)` (filtered to hparams.max_length,
    repeated, shuffled, token-batched), taking batches until they hold --epochs x the number of
    examples (~one epoch); every training batch is full.
  * eval: one pass of `evaluation_dataset(dataset, hparams)`: every example once, each bucket's
    last, partial batch padded to the full batch size with all-pad rows (counted as padding).

Reference rows, computed analytically in numpy from the example lengths and the boundaries
`input_pipeline.bucket_boundaries(max_length, hp.min_length_bucket, hp.length_bucket_step)` with
`input_pipeline.bucket_of`:

  * joint (analytic): both sides padded to the boundary of max(len(inputs), len(targets)), what
    the batching does, without partial batches: the train stream should match it closely.
  * per-side (analytic): each side padded to its own bucket's boundary, a scheme that would pad
    a short target less when its source is long.

Packed rows (--packed_lengths, e.g. 64,128,256; hparams packed_batches=true, packed_length=L,
t2tlite/data/packing.py): the same `training_dataset` call with packing on, whose batches are
batch_size // L rows of L tokens per side, each row several pairs laid end to end (first-fit
within windows of input_pipeline.PACK_WINDOW pairs of the shuffled stream), as tensor2tensor's
`packed` problems. Pairs with a side longer than L are dropped (as max_length drops them), so the
table also gives the pairs kept. Evaluation is never packed (its rows are the eval column above).

Data (read in place, never copied): Multi30k train en-de (29000 pairs, ../shared/data/multi30k)
with an 8000-piece BPE vocabulary learned on it (both sides); newstest2013 en-de (3000 pairs,
../shared/data/wmt) with an 8000-piece BPE vocabulary learned on newstest2008-2012 en-de
(13,071 news pairs, both sides; there is no WMT training text on this machine, so the vocabulary
is smaller than the paper's 37000 and learned on little text: its pieces are shorter and the
sentences longer than with the paper's vocabulary). Vocabularies are learned with
`t2tlite.data.subword.train_vocabulary` into a temporary directory; ids come from sentencepiece,
plus EOS (id 1); padding is id 0. Pairs with an empty side are dropped, as t2t-datagen does.

hparams: --hparams_set (transformer_base) with batch_size=--batch_size (4096) and each
length_bucket_step of --steps (1.1 = the default, 1.2, 1.5), plus one row with batch_size
--big_batch_size (25000) at the default step, the paper's "approximately 25000 source tokens and
25000 target tokens" per step: the table gives mean real source and target tokens per batch.

Usage:
  python bench/padding_efficiency.py                                  # both data sets (~1 min)
  python bench/padding_efficiency.py --datasets newstest2013 --steps 1.1 --big_batch_size 0
  python bench/padding_efficiency.py --output_json padding.json
  python bench/padding_efficiency.py --steps 1.1 --big_batch_size 0 --packed_lengths 64,128,256 \
      --epochs 3
Prints a table per data set; --output_json writes every number and the flags.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench_util import read_pairs, shared_path  # noqa: E402

MULTI30K = shared_path("data", "multi30k")
WMT = shared_path("data", "wmt")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--datasets", default="multi30k,newstest2013",
                 help="comma list of: multi30k, newstest2013")
  p.add_argument("--hparams_set", default="transformer_base")
  p.add_argument("--batch_size", type=int, default=4096, help="tokens per batch (hparams)")
  p.add_argument("--steps", default="1.1,1.2,1.5",
                 help="comma list of length_bucket_step values, each a row at --batch_size")
  p.add_argument("--big_batch_size", type=int, default=25000,
                 help="one more row at this batch_size and the hparams set's default step "
                      "(0 = skip)")
  p.add_argument("--packed_lengths", default="",
                 help="comma list of packed row lengths, each a packed row at --batch_size "
                      "(empty = no packed rows)")
  p.add_argument("--vocab_size", type=int, default=8000)
  p.add_argument("--epochs", type=float, default=1.0,
                 help="train stream: take batches until they hold this many epochs of examples")
  p.add_argument("--seed", type=int, default=1, help="training_dataset shuffle seed")
  p.add_argument("--multi30k_dir", default=MULTI30K)
  p.add_argument("--wmt_dir", default=WMT)
  p.add_argument("--output_json", default="")
  return p.parse_args(argv)


def data_sets(args):
  """name -> (description, vocabulary files [(src, tgt)], measured files (src, tgt))."""
  m, w = args.multi30k_dir, args.wmt_dir
  train = (os.path.join(m, "train.en.gz"), os.path.join(m, "train.de.gz"))
  news = [tuple(os.path.join(w, "newstest2008-2012", f"newstest{y}.{lang}.gz")
                for lang in ("en", "de")) for y in range(2008, 2013)]
  return {
      "multi30k": ("Multi30k train en-de; BPE vocabulary learned on it", [train], train),
      "newstest2013": ("newstest2013 en-de; BPE vocabulary learned on newstest2008-2012 en-de",
                       news, (os.path.join(w, "newstest2013.en"),
                              os.path.join(w, "newstest2013.de"))),
  }


def make_dataset(source_ids, target_ids):
  """tf.data of {"inputs": int32 [s], "targets": int32 [t]}, ids + EOS, in file order."""
  import tensorflow as tf

  def flat(ids):
    lengths = np.array([len(x) + 1 for x in ids], np.int64)
    values = np.concatenate([np.asarray(x + [1], np.int32) for x in ids])
    return tf.constant(values), tf.constant(np.concatenate([[0], np.cumsum(lengths)]))

  (s_values, s_splits), (t_values, t_splits) = flat(source_ids), flat(target_ids)
  return tf.data.Dataset.range(len(source_ids)).map(
      lambda i: {"inputs": s_values[s_splits[i]:s_splits[i + 1]],
                 "targets": t_values[t_splits[i]:t_splits[i + 1]]})


def batch_stats(batches, max_rows=None):
  """Real and padded tokens per side over batches; stops once max_rows rows were taken."""
  out = dict(batches=0, rows=0, pad_rows=0, real_inputs=0, real_targets=0, padded_inputs=0,
             padded_targets=0, shapes={})
  for batch in batches:
    inputs, targets = batch["inputs"], batch["targets"]
    n, length = targets.shape
    out["batches"] += 1
    out["rows"] += n
    out["pad_rows"] += int(np.sum(~np.any(targets != 0, axis=1)))
    out["real_inputs"] += int(np.count_nonzero(inputs))
    out["real_targets"] += int(np.count_nonzero(targets))
    out["padded_inputs"] += inputs.size
    out["padded_targets"] += targets.size
    out["shapes"][f"{n}x{length}"] = out["shapes"].get(f"{n}x{length}", 0) + 1
    if max_rows is not None and out["rows"] >= max_rows:
      break
  real = out["real_inputs"] + out["real_targets"]
  out["efficiency"] = real / max(1, out["padded_inputs"] + out["padded_targets"])
  out["efficiency_inputs"] = out["real_inputs"] / max(1, out["padded_inputs"])
  out["efficiency_targets"] = out["real_targets"] / max(1, out["padded_targets"])
  for k in ("real_inputs", "real_targets", "padded_inputs", "padded_targets", "rows"):
    out[f"mean_{k}_per_batch"] = out[k] / max(1, out["batches"])
  return out


def analytic(s_len, t_len, boundaries):
  """Efficiency if both sides pad to the joint bucket, and if each pads to its own bucket."""
  from t2tlite.training import input_pipeline
  b = np.asarray(boundaries)
  bucket = np.vectorize(lambda x: input_pipeline.bucket_of(int(x), boundaries))
  real = float(np.sum(s_len) + np.sum(t_len))
  joint = 2 * b[bucket(np.maximum(s_len, t_len))]
  per_side = b[bucket(s_len)] + b[bucket(t_len)]
  return dict(joint=real / float(np.sum(joint)), per_side=real / float(np.sum(per_side)))


def measure_config(dataset, s_len, t_len, hp, args):
  from t2tlite.training import input_pipeline
  max_length = hp.max_length or int(max(np.max(s_len), np.max(t_len)))
  kept = np.maximum(s_len, t_len) <= max_length
  boundaries = input_pipeline.bucket_boundaries(max_length, hp.min_length_bucket,
                                                hp.length_bucket_step)
  t0 = time.perf_counter()
  train = batch_stats(input_pipeline.training_dataset(dataset, hp, seed=args.seed)
                      .as_numpy_iterator(), max_rows=int(np.ceil(args.epochs * kept.sum())))
  train_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  evaluation = batch_stats(input_pipeline.evaluation_dataset(dataset, hp).as_numpy_iterator())
  eval_s = time.perf_counter() - t0
  assert evaluation["rows"] - evaluation["pad_rows"] == len(s_len), "eval pass lost examples"
  return dict(batch_size=hp.batch_size, length_bucket_step=hp.length_bucket_step,
              min_length_bucket=hp.min_length_bucket, max_length=max_length,
              buckets=len(boundaries), boundaries=boundaries, train_examples_kept=int(kept.sum()),
              train=train, eval=evaluation, train_seconds=train_s, eval_seconds=eval_s,
              analytic=analytic(s_len[kept], t_len[kept], boundaries))


def measure_packed(dataset, s_len, t_len, hp, args):
  """The packed training stream: ~--epochs of the kept pairs' tokens, in rows of packed_length."""
  from t2tlite.training import input_pipeline
  kept = np.maximum(s_len, t_len) <= hp.longest_training_side
  real = int(s_len[kept].sum() + t_len[kept].sum())
  t0 = time.perf_counter()
  batches = input_pipeline.training_dataset(dataset, hp, seed=args.seed).as_numpy_iterator()
  pairs = [0]
  train = batch_stats(_until_real_tokens(batches, int(np.ceil(args.epochs * real)), pairs))
  longer_side = max(s_len[kept].sum(), t_len[kept].sum())
  return dict(batch_size=hp.batch_size, packed_length=hp.packed_length,
              train_examples_kept=int(kept.sum()), train=train,
              train_seconds=time.perf_counter() - t0, pairs_per_row=pairs[0] / max(1, train["rows"]),
              bound=real / float(2 * hp.packed_length * np.ceil(longer_side / hp.packed_length)))


def _until_real_tokens(batches, wanted, pairs):
  """Batches until they hold `wanted` real tokens (both sides); pairs[0] counts their pairs."""
  seen = 0
  for batch in batches:
    yield batch
    seen += int(np.count_nonzero(batch["inputs"])) + int(np.count_nonzero(batch["targets"]))
    pairs[0] += int(np.count_nonzero((batch["targets_position"] == 0) & (batch["targets"] != 0)))
    if seen >= wanted:
      return


def print_packed(rows):
  print(f"  packed: {'batch':>6s} {'L':>4s} {'kept':>6s} | {'train':>6s} {'src':>6s} "
        f"{'tgt':>6s} {'bound':>6s} | {'trn bat':>7s} {'rows':>5s} {'pairs/row':>9s} "
        f"{'src real':>8s} {'tgt real':>8s}")
  for r in rows:
    t = r["train"]
    print(f"          {r['batch_size']:6d} {r['packed_length']:4d} {r['train_examples_kept']:6d} | "
          f"{t['efficiency']:6.1%} {t['efficiency_inputs']:6.1%} {t['efficiency_targets']:6.1%} "
          f"{r['bound']:6.1%} | {t['batches']:7d} {t['mean_rows_per_batch']:5.1f} "
          f"{r['pairs_per_row']:9.2f} {t['mean_real_inputs_per_batch']:8.0f} "
          f"{t['mean_real_targets_per_batch']:8.0f}")


def print_table(name, desc, info, rows):
  print(f"\n[{name}] {desc}")
  print(f"  {info['pairs']} pairs, vocab {info['vocab_size']} BPE; tokens with EOS: source mean "
        f"{info['source_mean']:.1f} (max {info['source_max']}), target mean "
        f"{info['target_mean']:.1f} (max {info['target_max']})")
  print(f"  {'batch':>6s} {'step':>4s} {'bkts':>4s} | {'train':>6s} {'eval':>6s} | "
        f"{'joint':>6s} {'perside':>7s} | {'trn bat':>7s} {'rows':>6s} {'src real':>8s} "
        f"{'tgt real':>8s} {'padded':>7s} | {'ev bat':>6s} {'pad rows':>8s}")
  for r in rows:
    t, e, a = r["train"], r["eval"], r["analytic"]
    print(f"  {r['batch_size']:6d} {r['length_bucket_step']:4.2f} {r['buckets']:4d} | "
          f"{t['efficiency']:6.1%} {e['efficiency']:6.1%} | {a['joint']:6.1%} "
          f"{a['per_side']:7.1%} | {t['batches']:7d} {t['mean_rows_per_batch']:6.1f} "
          f"{t['mean_real_inputs_per_batch']:8.0f} {t['mean_real_targets_per_batch']:8.0f} "
          f"{t['mean_padded_inputs_per_batch']:7.0f} | {e['batches']:6d} {e['pad_rows']:8d}")


def main(args):
  from absl import logging as absl_logging
  absl_logging.set_verbosity(absl_logging.WARNING)
  import sentencepiece as spm
  import tensorflow as tf
  from t2tlite import registry
  from t2tlite.data import subword

  sets = data_sets(args)
  names = [x.strip() for x in args.datasets.split(",") if x.strip()]
  for x in names:
    if x not in sets:
      raise SystemExit(f"unknown data set {x!r}; choose from {', '.join(sets)}")
  steps = [float(x) for x in args.steps.split(",") if x.strip()]
  base = registry.hparams(args.hparams_set)
  configs = [base.replace(batch_size=args.batch_size, length_bucket_step=s) for s in steps]
  if args.big_batch_size:
    configs.append(base.replace(batch_size=args.big_batch_size))
  packed_configs = [base.replace(batch_size=args.batch_size, packed_batches=True,
                                 packed_length=int(x))
                    for x in args.packed_lengths.split(",") if x.strip()]
  started = datetime.datetime.now().astimezone()
  print(f"padding efficiency, {started:%Y-%m-%d %H:%M %Z}; {args.hparams_set} (max_length "
        f"{base.max_length}, min_length_bucket {base.min_length_bucket}, shuffle buffer "
        f"{base.shuffle_buffer_size}); tensorflow {tf.__version__}, sentencepiece "
        f"{spm.__version__}, nproc {os.cpu_count()}, {platform.python_version()}")

  results = {}
  scratch = tempfile.mkdtemp(prefix="padding_efficiency_")
  try:
    for name in names:
      desc, vocab_files, (src, tgt) = sets[name]
      vocab_lines, vocab_pairs = [], 0
      for vs, vt in vocab_files:
        pairs, _ = read_pairs(vs, vt)
        vocab_pairs += len(pairs)
        vocab_lines += [line for pair in pairs for line in pair]
      t0 = time.perf_counter()
      encoder = subword.train_vocabulary(vocab_lines, os.path.join(scratch, f"{name}.model"),
                                         args.vocab_size, vocab_type="bpe")
      print(f"{name}: vocabulary of {encoder.vocab_size} BPE pieces learned on {vocab_pairs} "
            f"pairs (both sides) in {time.perf_counter() - t0:.1f} s")
      pairs, stats = read_pairs(src, tgt)
      sp = spm.SentencePieceProcessor(model_file=encoder.model_path)
      source_ids = sp.encode([p[0] for p in pairs])
      target_ids = sp.encode([p[1] for p in pairs])
      s_len = np.array([len(x) + 1 for x in source_ids])
      t_len = np.array([len(x) + 1 for x in target_ids])
      info = dict(files=[src, tgt], pairs=len(pairs), lines_read=stats.read,
                  dropped_empty=stats.empty, vocab_files=vocab_files, vocab_pairs=vocab_pairs,
                  vocab_size=encoder.vocab_size, source_tokens=int(s_len.sum()),
                  target_tokens=int(t_len.sum()), source_mean=float(s_len.mean()),
                  target_mean=float(t_len.mean()), source_max=int(s_len.max()),
                  target_max=int(t_len.max()))
      dataset = make_dataset(source_ids, target_ids)
      rows = []
      for hp in configs:
        r = measure_config(dataset, s_len, t_len, hp, args)
        rows.append(r)
        print(f"  batch_size {hp.batch_size} step {hp.length_bucket_step}: train "
              f"{r['train']['efficiency']:.1%} ({r['train_seconds']:.1f} s), eval "
              f"{r['eval']['efficiency']:.1%} ({r['eval_seconds']:.1f} s)", flush=True)
      packed = []
      for hp in packed_configs:
        r = measure_packed(dataset, s_len, t_len, hp, args)
        packed.append(r)
        print(f"  batch_size {hp.batch_size} packed_length {hp.packed_length}: train "
              f"{r['train']['efficiency']:.1%} (source {r['train']['efficiency_inputs']:.1%}, "
              f"target {r['train']['efficiency_targets']:.1%}; {r['train_seconds']:.1f} s)",
              flush=True)
      results[name] = dict(description=desc, data=info, configs=rows, packed=packed)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)

  print("\nPadding efficiency = real tokens / all tokens (inputs + targets, EOS counted, "
        "padding id 0).")
  print("  train: training_dataset stream, ~--epochs of examples; eval: one "
        "evaluation_dataset pass (all-pad rows of partial batches count as padding);")
  print("  joint / perside: analytic, both sides to the bucket of max(s, t) / each side to its "
        "own bucket; trn bat, rows, src real, tgt real, padded: train batches and per-batch means "
        "(padded = rows x length, per side); ev bat, pad rows: eval batches, all-pad rows")
  if packed_configs:
    print("  packed: L = packed_length (tokens per side of a row), kept = pairs with both sides "
          "<= L; train / src / tgt: efficiency over both sides / inputs / targets of ~--epochs "
          "of real tokens; bound: the best any packing reaches (the longer side's tokens fill "
          "ceil(tokens / L) rows exactly); pairs/row: mean pairs in a row")
  for name in names:
    print_table(name, results[name]["description"], results[name]["data"],
                results[name]["configs"])
    if results[name]["packed"]:
      print_packed(results[name]["packed"])

  if args.output_json:
    with open(args.output_json, "w") as f:
      json.dump(dict(started=started.isoformat(),
                     finished=datetime.datetime.now().astimezone().isoformat(),
                     machine=dict(nproc=os.cpu_count(), platform=platform.platform()),
                     versions=dict(tensorflow=tf.__version__, sentencepiece=spm.__version__),
                     flags=vars(args), results=results), f, indent=1)
    print(f"\nwrote {args.output_json}")


if __name__ == "__main__":
  main(parse_args())
