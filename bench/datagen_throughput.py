"""Datagen throughput: t2tlite's tokenization + shard writing beside sentencepiece's own encoder.

Why
---
t2t-datagen tokenizes chunks of lines with sentencepiece's multi-threaded C++ batch encoder in a
background thread while the main thread writes tf.train.Example records; the same model file
also runs in-graph through tensorflow_text (`in_graph=True`). The obvious peer is
sentencepiece's own Python encoder called once per side and then writing. This script says, on
real text and in the same run, how many sentence pairs per second each gets, and that all give
the same ids.

What is measured
----------------
On --src/--tgt (default: Multi30k train en-de, 29000 pairs, gzipped, read in place under
../shared/data/multi30k), with one shared --vocab_size (8000) BPE vocabulary learned once
(untimed) into a temporary directory from both sides. All lines are read into memory before any
timing, so every system below sees the same Python lists of str and no file reading:

  * ours:          `t2tlite.problems.translate.tokenize_pairs` (sentencepiece C++ batch encode of
                   8192-pair chunks in a background thread, overlapped with writing) and, for each
                   pair, `serialize_example` written by a `tf.io.TFRecordWriter` to a temporary
                   file: the loop t2t-datagen runs.
  * ours_graph:    the same with `in_graph=True` (tensorflow_text SentencepieceTokenizer op).
  * ours_tok:      tokenize_pairs alone, no serialization or writing (decomposition).
  * sp_batch:      `SentencePieceProcessor(model_file=...).encode(lines)` on the source and the
                   target lines (one batch call each, sentencepiece's default threads): tokenization
                   only.
  * sp_batch_1t:   the same with num_threads=1.
  * sp_write:      sp_batch + the same `serialize_example` + TFRecordWriter loop: the fair
                   "tokenization + shard writing" peer of ours.
  * sp_line:       per-line `sp.encode(line)` loop (tokenization only).
  * write_only:    serialize_example + TFRecordWriter from ids computed beforehand
                   (decomposition: the cost of the writing part alone).
  * t2t_datagen:   (--datagen, default on) `registry.problem("multi30k_ende").generate_data` into
                   a fresh data_dir that already holds the vocabulary as
                   vocab.multi30k_ende.8000.model (+ .vocab), so it reuses it and only reads,
                   tokenizes and writes. It reads the gzipped files itself (checks line counts,
                   drops empty pairs), and also writes dev and test (1014 + 1000 = 2014 more pairs,
                   plus their raw text and a stats file): its pairs/s counts all 31014 pairs.
                   --max_pairs does not apply to it.

Before timing, ours and sp_batch run once untimed; their ids must be identical for every source
and target line (asserted), and the train shard t2t_datagen writes is checked against the same
ids after its first round.

The host is shared and its speed drifts, so the systems are interleaved: each of --rounds rounds
runs every system once (the order rotated from round to round). Reported: median over rounds of
pairs/s (sentences/s = 2 x pairs/s, both sides), and ratios ours/peer (throughput, > 1 = ours
faster) computed within each round, then their median. Only same-run ratios mean anything. Each
measurement records its wall time, the CPU time of this process (cores used = CPU / wall) and
the cores other processes used meanwhile (/proc/stat busy time minus our own CPU).

Usage:
  python bench/datagen_throughput.py                       # 3 rounds, all systems (~1.5 min)
  python bench/datagen_throughput.py --rounds 1 --max_pairs 5000 --datagen false   # quick check
  python bench/datagen_throughput.py --output_json datagen.json
Prints a table; --output_json writes every measurement, the machine, versions and the flags.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench_util import host_cpu_seconds, machine_info, shared_path, str2bool

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MULTI30K = shared_path("data", "multi30k")
SYSTEMS = ("ours", "ours_graph", "ours_tok", "sp_batch", "sp_batch_1t", "sp_write", "sp_line", "write_only",
           "t2t_datagen")
LABELS = {
    "ours": "ours: tokenize_pairs + write",
    "ours_graph": "ours: tokenize_pairs(in_graph) + write",
    "ours_tok": "ours: tokenize_pairs only",
    "sp_batch": "sentencepiece batch encode",
    "sp_batch_1t": "sentencepiece batch, 1 thread",
    "sp_write": "sentencepiece batch + write",
    "sp_line": "sentencepiece per-line encode",
    "write_only": "write only (ids precomputed)",
    "t2t_datagen": "t2t-datagen generate_data (+dev/test)",
}
# Ratios reported: ours against each peer, and the full datagen path against the fair peer.
RATIOS = [("ours", "sp_write"), ("ours_graph", "sp_write"), ("ours", "sp_batch"), ("ours", "sp_batch_1t"),
          ("ours", "sp_line"), ("ours_tok", "sp_batch"), ("ours_tok", "sp_batch_1t"),
          ("t2t_datagen", "sp_write")]


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--src", default=os.path.join(MULTI30K, "train.en.gz"))
  p.add_argument("--tgt", default=os.path.join(MULTI30K, "train.de.gz"))
  p.add_argument("--vocab_size", type=int, default=8000)
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--max_pairs", type=int, default=0,
                 help="use only the first N pairs (0 = all); for quick checks")
  p.add_argument("--systems", default=",".join(s for s in SYSTEMS if s != "t2t_datagen"),
                 help="comma list of: " + ",".join(SYSTEMS[:-1]))
  p.add_argument("--datagen", type=str2bool, default=True,
                 help="also time the full t2t-datagen path (multi30k_ende, reads --tmp_dir)")
  p.add_argument("--tmp_dir", default=MULTI30K, help="t2t-datagen's --tmp_dir (Multi30k files)")
  p.add_argument("--output_json", default="")
  return p.parse_args(argv)


# --------------------------------------------------------------------------------------------
# Machine and host load
# --------------------------------------------------------------------------------------------
def versions():
  import sentencepiece
  import tensorflow as tf
  import tensorflow_text
  return dict(tensorflow=tf.__version__, tensorflow_text=tensorflow_text.__version__,
              sentencepiece=sentencepiece.__version__)


def measure(fn):
  """Runs fn() once; wall time, this process's CPU time, and other processes' cores."""
  host0, own0, t0 = host_cpu_seconds(), time.process_time(), time.perf_counter()
  pairs = fn()
  wall = time.perf_counter() - t0
  own, host1 = time.process_time() - own0, host_cpu_seconds()
  foreign = None if host0 is None else max(0.0, (host1[0] - host0[0] - own) / wall)
  return dict(pairs=pairs, wall_s=wall, cpu_s=own, cores_used=own / wall,
              foreign_cores=foreign, pairs_per_s=pairs / wall)


# --------------------------------------------------------------------------------------------
# Systems; each returns the number of pairs it processed.
# --------------------------------------------------------------------------------------------
def write_records(path, source_ids, target_ids):
  import tensorflow as tf
  from t2tlite.data.records import serialize_pair as serialize_example
  with tf.io.TFRecordWriter(path) as writer:
    for s_ids, t_ids in zip(source_ids, target_ids):
      writer.write(serialize_example(s_ids, t_ids))


def run_ours(pairs, encoder, path, write=True, keep_ids=None, in_graph=False):
  import tensorflow as tf
  from t2tlite.data.records import serialize_pair as serialize_example
  from t2tlite.problems.translate import tokenize_pairs
  n = 0
  writer = tf.io.TFRecordWriter(path) if write else None
  for sources, _, source_ids, target_ids in tokenize_pairs(iter(pairs), encoder, in_graph=in_graph):
    for k in range(len(sources)):
      if writer is not None:
        writer.write(serialize_example(source_ids[k], target_ids[k]))
      if keep_ids is not None:
        keep_ids[0].append(list(source_ids[k]))
        keep_ids[1].append(list(target_ids[k]))
    n += len(sources)
  if writer is not None:
    writer.close()
  return n


def run_sp(sp, sources, targets, num_threads=None, per_line=False, record=None):
  """sentencepiece's Python encoder on both sides; optionally the same records written."""
  if per_line:
    source_ids = [sp.encode(x) for x in sources]
    target_ids = [sp.encode(x) for x in targets]
  else:
    source_ids = sp.encode(sources, num_threads=num_threads)
    target_ids = sp.encode(targets, num_threads=num_threads)
  if record:
    write_records(record, source_ids, target_ids)
  return len(source_ids)


def run_t2t_datagen(vocab_model, vocab_size, tmp_dir, scratch):
  """generate_data into a fresh data_dir holding the vocabulary; (pairs, data_dir, problem)."""
  from t2tlite import registry
  problem = registry.problem("multi30k_ende")
  problem.configure(f"vocab_size={vocab_size}")
  data_dir = tempfile.mkdtemp(prefix="datagen_", dir=scratch)
  dst = problem.vocab_path(data_dir)
  shutil.copy(vocab_model, dst)
  shutil.copy(vocab_model[:-len(".model")] + ".vocab", dst[:-len(".model")] + ".vocab")
  problem.generate_data(data_dir, tmp_dir=tmp_dir)
  written = sum(problem.split_stats(data_dir, s)["pairs_written"] for s in ("train", "dev", "test"))
  return written, data_dir, problem


def check_datagen_train(problem, data_dir, sp_ids, pairs):
  """The train shard(s) t2t_datagen wrote hold exactly sp's ids (+ EOS) of its kept pairs."""
  import tensorflow as tf
  got = []
  for path in problem.shard_paths(data_dir, "train"):
    for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
      ex = tf.train.Example.FromString(raw).features.feature
      got.append((list(ex["inputs"].int64_list.value), list(ex["targets"].int64_list.value)))
  want = [(s + [1], t + [1]) for s, t, (a, b) in zip(*sp_ids, pairs)
          if a.strip() and b.strip()]  # What parallel_text.drop_empty keeps.
  return got == want, len(got)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------
def main(args):
  from absl import logging as absl_logging
  absl_logging.set_verbosity(absl_logging.WARNING)
  import sentencepiece as spm
  from t2tlite.data import parallel_text, subword

  systems = [s.strip() for s in args.systems.split(",") if s.strip()]
  for s in systems:
    if s not in SYSTEMS:
      sys.exit(f"unknown system {s!r}; choose from {', '.join(SYSTEMS)}")
  if args.datagen and "t2t_datagen" not in systems:
    systems.append("t2t_datagen")
  started = datetime.datetime.now().astimezone()
  info, vers = machine_info(), versions()
  print(f"datagen throughput, {started:%Y-%m-%d %H:%M %Z}")
  print(f"machine: nproc {info['nproc']}, {info['cpu_model']}, {info['platform']}")
  print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))

  pairs = list(parallel_text.read_parallel(args.src, args.tgt))
  if args.max_pairs:
    pairs = pairs[:args.max_pairs]
  sources, targets = [p[0] for p in pairs], [p[1] for p in pairs]
  n = len(pairs)
  empty = sum(1 for s, t in pairs if not s.strip() or not t.strip())
  print(f"data: {args.src} + {args.tgt}: {n} pairs in memory ({empty} with an empty side)")

  scratch = tempfile.mkdtemp(prefix="datagen_throughput_")
  try:
    t0 = time.perf_counter()
    encoder = subword.train_vocabulary(sources + targets, os.path.join(scratch, "vocab.model"),
                                       args.vocab_size, vocab_type="bpe", sample_size=1_000_000)
    print(f"vocabulary: {encoder.vocab_size} BPE pieces learned from both sides in "
          f"{time.perf_counter() - t0:.1f} s (untimed) -> {encoder.model_path}")
    sp = spm.SentencePieceProcessor(model_file=encoder.model_path)
    record = os.path.join(scratch, "shard.tfrecord")

    # Untimed warm-up of ours and sp_batch, which doubles as the identity check.
    sp_ids = (sp.encode(sources), sp.encode(targets))
    for in_graph in (False, True):
      ours_ids = ([], [])
      run_ours(pairs, encoder, record, write=False, keep_ids=ours_ids, in_graph=in_graph)
      mismatch = [i for i in range(n) if ours_ids[0][i] != sp_ids[0][i]
                  or ours_ids[1][i] != sp_ids[1][i]]
      assert len(ours_ids[0]) == n and not mismatch, (
          f"in_graph={in_graph}: ids differ on {len(mismatch)} of {n} pairs, first at line "
          f"{mismatch[:1]}")
    print(f"ids: ours (C++ batch and tensorflow_text) == sentencepiece for all {n} source and {n} target "
          f"lines; {sum(map(len, sp_ids[0]))} source + {sum(map(len, sp_ids[1]))} target tokens "
          "(without EOS)")

    fns = {
        "ours": lambda: run_ours(pairs, encoder, record),
        "ours_graph": lambda: run_ours(pairs, encoder, record, in_graph=True),
        "ours_tok": lambda: run_ours(pairs, encoder, record, write=False),
        "sp_batch": lambda: run_sp(sp, sources, targets),
        "sp_batch_1t": lambda: run_sp(sp, sources, targets, num_threads=1),
        "sp_write": lambda: run_sp(sp, sources, targets, record=record),
        "sp_line": lambda: run_sp(sp, sources, targets, per_line=True),
        "write_only": lambda: (write_records(record, *sp_ids), n)[1],
    }
    datagen_check = None
    datagen_train = [os.path.join(os.path.abspath(args.tmp_dir), f"train.{lang}.gz")
                     for lang in ("en", "de")]
    same_as_datagen_train = (not args.max_pairs and [os.path.abspath(args.src),
                                                     os.path.abspath(args.tgt)] == datagen_train)

    last_datagen = {}

    def datagen():
      written, data_dir, problem = run_t2t_datagen(encoder.model_path, args.vocab_size,
                                                   args.tmp_dir, scratch)
      last_datagen.update(data_dir=data_dir, problem=problem)
      return written

    fns["t2t_datagen"] = datagen
    raw = {s: [] for s in systems}
    for r in range(args.rounds):
      order = systems[r % len(systems):] + systems[:r % len(systems)]
      print(f"round {r + 1}/{args.rounds}:")
      for s in order:
        m = measure(fns[s])
        raw[s].append(m)
        if os.path.exists(record):
          os.remove(record)
        if s == "t2t_datagen":  # Untimed: check its train shard once, then delete its output.
          if datagen_check is None and same_as_datagen_train:
            datagen_check = check_datagen_train(last_datagen["problem"],
                                                last_datagen["data_dir"], sp_ids, pairs)
          shutil.rmtree(last_datagen["data_dir"], ignore_errors=True)
        print(f"  {LABELS[s]:40s} {m['pairs']:6d} pairs {m['wall_s']:7.2f} s "
              f"{m['pairs_per_s']:9.0f} pairs/s  ({m['cores_used']:.2f} cores ours, "
              f"{m['foreign_cores'] or 0:.2f} other)", flush=True)
    if datagen_check is not None:
      ok, count = datagen_check
      assert ok, f"t2t_datagen's train shard ({count} records) differs from sentencepiece's ids"
      print(f"ids: t2t_datagen's train shard == sentencepiece ids + EOS for all {count} pairs")
  finally:
    shutil.rmtree(scratch, ignore_errors=True)

  summary = {}
  for s in systems:
    per_round = [m["pairs_per_s"] for m in raw[s]]
    summary[s] = dict(label=LABELS[s], pairs=raw[s][0]["pairs"],
                      median_pairs_per_s=statistics.median(per_round),
                      median_sentences_per_s=2 * statistics.median(per_round),
                      median_wall_s=statistics.median(m["wall_s"] for m in raw[s]),
                      median_cores_used=statistics.median(m["cores_used"] for m in raw[s]),
                      pairs_per_s_per_round=per_round,
                      foreign_cores_per_round=[m["foreign_cores"] for m in raw[s]])
  ratios = {}
  for a, b in RATIOS:
    if a in raw and b in raw:
      per_round = [x["pairs_per_s"] / y["pairs_per_s"] for x, y in zip(raw[a], raw[b])]
      ratios[f"{a}/{b}"] = dict(per_round=per_round, median=statistics.median(per_round))

  print()
  print(f"Tokenization (+ shard writing) of {n} {os.path.basename(args.src)} / "
        f"{os.path.basename(args.tgt)} pairs, vocab {encoder.vocab_size} BPE, median of "
        f"{args.rounds} interleaved rounds; sentences/s = 2 x pairs/s")
  print(f"  {'system':40s} {'pairs':>6s} {'wall s':>7s} {'pairs/s':>9s} {'sent/s':>9s} "
        f"{'cores':>5s}   pairs/s per round (other procs' cores)")
  for s, m in summary.items():
    pr = ", ".join(f"{x:.0f}" for x in m["pairs_per_s_per_round"])
    fo = ", ".join("-" if x is None else f"{x:.2f}" for x in m["foreign_cores_per_round"])
    print(f"  {m['label']:40s} {m['pairs']:6d} {m['median_wall_s']:7.2f} "
          f"{m['median_pairs_per_s']:9.0f} {m['median_sentences_per_s']:9.0f} "
          f"{m['median_cores_used']:5.2f}   [{pr}] ({fo})")
    worst = max([x for x in m["foreign_cores_per_round"] if x is not None] or [0.0])
    if worst > 0.3:
      print(f"    ^ WARNING: other processes used up to {worst:.2f} of {os.cpu_count()} cores")
  if "t2t_datagen" in summary:
    print("  (t2t_datagen also reads and checks the gzipped files, writes dev/test text and "
          "stats; its pairs include dev + test, 2014 more than train)")
  print("  throughput ratios (> 1: the first is faster), per round then median:")
  for k, rt in ratios.items():
    pr = ", ".join(f"{x:.3f}" for x in rt["per_round"])
    print(f"    {k:28s} {rt['median']:7.3f}   [{pr}]")

  if args.output_json:
    with open(args.output_json, "w") as f:
      json.dump(dict(started=started.isoformat(),
                     finished=datetime.datetime.now().astimezone().isoformat(),
                     machine=info, versions=vers, flags=vars(args), pairs=n,
                     vocab_size=encoder.vocab_size, summary=summary, ratios=ratios, raw=raw),
                f, indent=1)
    print(f"\nwrote {args.output_json}")


if __name__ == "__main__":
  main(parse_args())
