"""Beam-4 decoding speed of t2tlite (cached and uncached) beside TF Model Garden, interleaved.

Why
---
t2t-decoder's beam search keeps per-layer key/value caches so each step runs the decoder on one
position (`Transformer.decode_step`), computes the cross-attention keys/values once per sentence,
and runs the whole search as one `tf.while_loop` compiled by XLA (hparams.xla). This script says,
in the same run, how many sentences and generated tokens per second that gives, against
  * the obvious peer: TF Model Garden's `Seq2SeqTransformer` with its own cached beam search
    (../shared/peers/peerB_tfm.py --mode decode), and
  * ours without the cache (`use_cache=False`: the decoder re-run over every position each step,
    `Transformer.decode_step_uncached`), i.e. what the cache buys.
On this CPU XLA is not always faster, so every configuration of ours is measured with
xla on (the hparams default) and off.

What is measured
----------------
Model: the peer's config "small" (flops.py CONFIGS["small"]): d_model 256, d_ff 1024, 4 heads,
3 encoder + 3 decoder layers, vocabulary 8000 (checked against flops.py at start). Ours is
`registry.hparams("transformer_base").replace(d_model=256, d_ff=1024, num_heads=4,
num_encoder_layers=3, num_decoder_layers=3, input_vocab_size=8000, target_vocab_size=8000)`
(post-norm, no attention biases, tied embeddings: 7,568,384 parameters), randomly initialized
(seed 0), decoded by `Decoder(model, DecodeHParams(beam_size=4, alpha=0.6, ...)).decode_ids`.
Model Garden's model is pre-norm with attention/FFN biases (a few more parameters, one more
LayerNorm per stack): the same matmul shapes.

Two workloads:
  (A) "same_shape", the number to quote: --batch (64) random sources of --src_len (20) ids in
      [3, V), decoded by beam --beam (4) to --decode_len (40) tokens.
        - Model Garden: peerB_tfm.py --config small --mode decode --beam 4 --batch 64
          --decode_src_len 20 --decode_len 40 (alpha 0.6, eos_id=-1: every sentence decodes to
          exactly 40 tokens, 40 model calls; its median over --tfm_steps timed calls after one
          untimed compiling call; it also runs a matmul calibration and a memory-bandwidth probe,
          reported as calib_gflops_*).
        - ours: extra_length = decode_len - src_len (max 40 tokens per sentence, then EOS is
          forced: 41 model calls), batch_size = --batch, batch_tokens 0 (one batch). A random
          model could end a sentence early (EOS among the top candidates); every generated
          token is counted and early endings are reported.
  (B) "text" (ours only: Model Garden's harness decodes random ids only): the first
      --text_lines (500) lines of --text_file (newstest2014 en, read in place), tokenized by a
      sentencepiece BPE vocabulary of the same size V learned untimed into a temporary directory
      from --vocab_files (newstest2008-2012 en+de); extra_length 50 (the paper's), beam 4, the
      DecodeHParams default batching (sorted by length, batch_size 64, batch_tokens 4096, lengths
      padded to a multiple of 8: several batch shapes, each compiled once). Measured with
      --text_xla (default xla on only: one cached pass over 500 lines takes minutes here). The
      uncached decoder is ~10x slower and quadratic in length (~4 s per line here), so it decodes
      only the first --uncached_lines (16) lines; the cached workers also time those same lines,
      so the cached/uncached ratio of (B) compares identical sentences.
  (C) "text_fixed", real text beside Model Garden: the first --fixed_lines (500) lines of
      --text_file in the same BPE vocabulary, grouped by t2t-decoder's default batching
      (`decoder.length_batches`: sorted by length, 64 sentences / 4096 tokens) into the batches
      both systems decode. Random models end sentences at arbitrary points, so neither may end
      one early: Model Garden runs with eos_id=-1 and extra_decode_length --fixed_extra_length
      (10), i.e. every sentence of a batch decodes to the batch's width (longest + EOS) + 10;
      ours gets extra_length 10 and a token constraint that allows EOS only where the search
      forces it (each sentence's length + 10), so each batch runs the same number of loop steps
      as Model Garden's (longest + 11). Sentences/s is the figure to compare (the same
      sentences, the same steps); generated tokens differ (Model Garden counts every row to the
      batch's length). Model Garden: bench/peers/tfm_text_decode.py (one graph for all
      batch shapes, traced by an untimed call; then --fixed_reps timed passes); ours: the
      compile-only warm-up above, then --fixed_reps timed decode_ids calls, xla on and off
      (--fixed_xla).

How
---
Every measurement is a fresh subprocess: the peer in its own venv (--tfm_python), ours as
`--worker` mode of this script. Ours warms up before timing by decoding the same sources once
with every sentence's maximum length forced to 0 (the wrapped search gets source lengths
-extra_length): this runs the very same compiled program for every batch shape (trace + XLA
compile) but stops after one loop step, so compilation costs seconds rather than a full decode
(the warm-up time is reported as warmup_s: mostly tracing + compiling). Then --reps timed
`decode_ids` calls (text: --text_reps); a call's time is the wall-clock of `decode_ids`, batching
and host transfer included. sentences/s = sentences / median call time; generated tokens/s =
generated target tokens (EOS not counted) / median call time, counted from the search's own
lengths of the best hypothesis; the tokens `decode_ids` returned (which stops at the first EOS or
pad id) are counted too, and any difference is reported. The peer's tokens are batch x its
output width (always decode_len).

The host is shared and drifts up to 2x over minutes, so everything is interleaved: each of
--rounds rounds runs, for (A), the peer and each cached variant of ours (the order rotated from
round to round); the first --uncached_rounds rounds also run the uncached variants of (A), and
the first --text_rounds rounds run (B). Reported per system: the median over rounds; ratios are
computed within each round (same minutes), then their median: ours cached / Model Garden (the
target: >= 2), ours cached / ours uncached, ours xla on / off. Each measurement records the CPU
other processes used while it ran (/proc/stat busy time minus the worker's own CPU), the table
warns above --quiet_cores; --quiet_wait S waits up to S seconds before each measurement for the
host to go quiet.

Usage:
  python bench/decode_speed.py                 # 3 rounds of A, A uncached + B once (~9 min here)
  python bench/decode_speed.py --rounds 1 --reps 1 --tfm_steps 1 --xla true \\
      --uncached_rounds 0 --text_lines 8 --uncached_lines 4      # quick check (~1.5 min)
  python bench/decode_speed.py --xla true --text_rounds 0 --output_json decode.json
  python bench/decode_speed.py --rounds 0 --uncached_rounds 0 --text_rounds 0 --fixed_rounds 3 \\
      --tfm_python $T2TLITE_TFM_PYTHON   # (C) only: real text beside Model Garden
Prints a table; --output_json writes every raw call time, the machine, versions and the flags.
"""

import argparse
import datetime
import gzip
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench_util import machine_info, peak_rss_mb, run_worker, shared_path, str2bool

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
TFM_PEER_DEFAULT = shared_path("peers", "peerB_tfm.py")
WMT = shared_path("data", "wmt")
VOCAB_FILES = ",".join(f"{WMT}/newstest2008-2012/newstest20{y}.{lang}.gz"
                       for y in ("08", "09", "10", "11", "12") for lang in ("en", "de"))
# The peer's config "small" (../shared/peers/flops.py CONFIGS["small"]); checked at start.
SMALL = dict(d=256, ff=1024, Le=3, Ld=3, V=8000, heads=4)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--rounds", type=int, default=3, help="rounds of workload A (peer + ours cached)")
  p.add_argument("--uncached_rounds", type=int, default=1,
                 help="the first N rounds also measure ours uncached on A (slow; 0 = never)")
  p.add_argument("--text_rounds", type=int, default=1,
                 help="the first N rounds also run workload B, real text (0 = never)")
  p.add_argument("--xla", default="true,false",
                 help="comma list of hparams.xla values to measure ours with")
  p.add_argument("--beam", type=int, default=4)
  p.add_argument("--alpha", type=float, default=0.6)
  # Workload A (same shape as the peer).
  p.add_argument("--batch", type=int, default=64)
  p.add_argument("--src_len", type=int, default=20)
  p.add_argument("--decode_len", type=int, default=40)
  p.add_argument("--reps", type=int, default=2, help="ours: timed decode calls per measurement (A)")
  p.add_argument("--uncached_reps", type=int, default=1,
                 help="ours uncached: timed decode calls per measurement (A; ~10x slower)")
  # Workload B (real text).
  p.add_argument("--text_file", default=f"{WMT}/newstest2014.en-de.en")
  p.add_argument("--text_lines", type=int, default=500)
  p.add_argument("--uncached_lines", type=int, default=16,
                 help="B: ours uncached decodes only the first N lines (cached also times them); "
                      "uncached costs ~4 s per line here, 100 lines ~6 min")
  p.add_argument("--text_extra_length", type=int, default=50)
  p.add_argument("--text_reps", type=int, default=1)
  p.add_argument("--text_xla", default="true",
                 help="comma list of hparams.xla values measured on B (each cached worker decodes "
                      "all --text_lines: ~3 min here; 'true,false' for both)")
  p.add_argument("--vocab_files", default=VOCAB_FILES,
                 help="comma list of (gzipped) text files the BPE vocabulary is learned from")
  # Workload C (real text beside Model Garden, fixed lengths).
  p.add_argument("--fixed_rounds", type=int, default=1,
                 help="the first N rounds also run workload C, real text beside Model Garden "
                      "(0 = never)")
  p.add_argument("--fixed_lines", type=int, default=500)
  p.add_argument("--fixed_extra_length", type=int, default=10,
                 help="C: every sentence decodes to (its batch's) source length + this")
  p.add_argument("--fixed_reps", type=int, default=1)
  p.add_argument("--fixed_xla", default="true,false",
                 help="C: comma list of hparams.xla values to measure ours with")
  p.add_argument("--fixed_concurrent_batches", default="0",
                 help="C: comma list of decode hparams concurrent_batches values for ours "
                      "(0: one batch per CPU core, the default; 1: one batch at a time)")
  p.add_argument("--tfm_text_script",
                 default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers",
                                      "tfm_text_decode.py"))
  # Peer.
  p.add_argument("--tfm_python", default=os.environ.get("T2TLITE_TFM_PYTHON", ""),
                 help="interpreter with tf-models-official 2.20 (default $T2TLITE_TFM_PYTHON); "
                      "empty skips the peer")
  p.add_argument("--tfm_script", default=TFM_PEER_DEFAULT)
  p.add_argument("--tfm_steps", type=int, default=2, help="peer: timed decode calls (its --steps)")
  # Driver.
  p.add_argument("--output_json", default="")
  p.add_argument("--timeout", type=int, default=1200, help="seconds per measurement subprocess")
  p.add_argument("--quiet_wait", type=float, default=0.0,
                 help="before each measurement wait up to this many seconds for other processes "
                      "to use < --quiet_cores cores (the host is shared; 0 = don't wait)")
  p.add_argument("--quiet_cores", type=float, default=0.3)
  p.add_argument("--verbose", action="store_true", help="pass the workers' stderr through")
  # Worker mode (internal): one measurement of ours in this process, one JSON line on stdout.
  p.add_argument("--worker", default="", choices=["", "ours"], help=argparse.SUPPRESS)
  p.add_argument("--workload", default="same_shape", choices=["same_shape", "text", "text_fixed"],
                 help=argparse.SUPPRESS)
  p.add_argument("--use_cache", type=str2bool, default=True, help=argparse.SUPPRESS)
  p.add_argument("--worker_xla", type=str2bool, default=True, help=argparse.SUPPRESS)
  p.add_argument("--worker_concurrent_batches", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--vocab_model", default="", help=argparse.SUPPRESS)
  p.add_argument("--lines", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--also_lines", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--batches_json", default="", help=argparse.SUPPRESS)
  p.add_argument("--no_early_eos", type=str2bool, default=False, help=argparse.SUPPRESS)
  return p.parse_args(argv)


def xla_values(text):
  out = []
  for x in [x for x in text.split(",") if x.strip()]:
    v = str2bool(x.strip())
    if v not in out:
      out.append(v)
  return out


# --------------------------------------------------------------------------------------------
# Worker: one measurement of t2tlite in this process.
# --------------------------------------------------------------------------------------------
def build_model(xla):
  import keras
  from t2tlite import registry
  from t2tlite.models.transformer import Transformer
  c = SMALL
  hp = registry.hparams("transformer_base").replace(
      d_model=c["d"], d_ff=c["ff"], num_heads=c["heads"], num_encoder_layers=c["Le"],
      num_decoder_layers=c["Ld"], input_vocab_size=c["V"], target_vocab_size=c["V"], xla=xla)
  keras.utils.set_random_seed(0)
  return Transformer(hp)  # A functional model: built (weights created) by construction.


class _RecordingSearch:
  """Wraps Decoder._search: keeps each batch's SearchResult (steps, lengths) for counting, and in
  warm-up mode forces every maximum length to 0 (same program, one loop step)."""

  def __init__(self, search, extra_length):
    self.search, self.extra_length = search, extra_length
    self.warmup, self.results = False, []

  def __call__(self, inputs, source_lengths):
    import tensorflow as tf
    if self.warmup:  # max_lengths = clip(lengths + extra, 0, ...) = 0: EOS forced at step 0.
      source_lengths = tf.fill(tf.shape(source_lengths), -self.extra_length)
    result = self.search(inputs, source_lengths)
    if not self.warmup:
      self.results.append((inputs.numpy(), result.steps, result.lengths[:, 0]))
    return result


class _NoEarlyEos:
  """Token constraint (search.py's interface): EOS only once a sentence has its maximum length.

  The search forces EOS at max_lengths[b] tokens; before that this forbids it, so a random
  model decodes every sentence to exactly its maximum length, as Model Garden does with
  eos_id=-1. State: int32 [rows], tokens left before the forced EOS.
  """

  def __init__(self, vocab_size, eos_id):
    self.vocab_size, self.eos_id = vocab_size, eos_id

  def initial_state(self, inputs, max_lengths):
    del inputs
    return max_lengths

  def mask(self, tokens_left):
    import tensorflow as tf
    not_eos = tf.not_equal(tf.range(self.vocab_size), self.eos_id)[tf.newaxis]
    return not_eos | (tokens_left <= 0)[:, tf.newaxis]

  def update(self, tokens_left, tokens):
    del tokens
    return tokens_left - 1


def time_decoding(decoder, recorder, sources, reps, label):
  """Compile-only warm-up, then `reps` timed decode_ids calls; a dict of times and counts."""
  recorder.warmup = True
  t0 = time.perf_counter()
  decoder.decode_ids(sources)
  warm = time.perf_counter() - t0
  recorder.warmup = False
  print(f"[ours {label}] warm-up (trace + compile, 1 step per batch) {warm:.2f}s",
        file=sys.stderr, flush=True)
  times, outputs = [], None
  for i in range(reps):
    recorder.results = []
    t0 = time.perf_counter()
    outputs = decoder.decode_ids(sources)
    times.append(time.perf_counter() - t0)
    print(f"[ours {label}] decode call {i} {times[-1]:.3f}s", file=sys.stderr, flush=True)
  # Search lengths count the EOS (forced after the maximum); generated tokens do not.
  # decode_ids may search several batches at once (concurrent_batches), so results come in
  # any order: each row is matched to its source by its ids. Rows whose first id is EOS are
  # pad_batch_rows' empty fillers: not counted.
  from t2tlite.constants import EOS_ID
  by_source, batches = {}, []
  for ids, st, ls in recorder.results:
    real = [(tuple(row[:list(row).index(EOS_ID)]), int(n) - 1)
            for row, n in zip(ids, ls.numpy()) if row[0] != EOS_ID]
    by_source.update(real)
    batches.append((max(len(source) for source, _ in real), list(ids.shape), int(st)))
  order = [i for i, s in enumerate(sources) if s]
  limit = decoder.max_input_length  # Longer sources were cut before the search.
  lens = [by_source[tuple(sources[i][:limit] if limit else sources[i])] for i in order]
  generated = dict(zip(order, lens))
  max_len = [len(s) + decoder.hparams.extra_length for s in sources]
  steps = sum(int(st) for _, st, _ in recorder.results)  # Summed over batches, overlapping or not.
  tokens = sum(lens)
  med = statistics.median(times)
  n = len(sources)
  return dict(sentences=n, call_times_s=times, median_s=med, warmup_s=warm,
              sent_per_s=n / med, tok_per_s=tokens / med, generated_tokens=tokens,
              returned_tokens=sum(len(o) for o in outputs), max_tokens=sum(max_len),
              ended_early=sum(1 for i, m in enumerate(max_len) if generated.get(i, 0) < m),
              returned_short=sum(1 for i, o in enumerate(outputs) if len(o) < generated.get(i, 0)),
              loop_steps=steps, ms_per_loop_step=1000 * med / max(1, steps),
              concurrent_batches=decoder.concurrent_batches(),
              batches=[dict(shape=shape, steps=st) for _, shape, st in sorted(batches)])


def run_ours(args):
  import numpy as np
  import tensorflow as tf
  import keras
  from t2tlite.constants import EOS_ID
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.decoder import Decoder

  model = build_model(args.worker_xla)
  hp = model.hparams
  V = hp.target_vocab_size
  constraint = None
  if args.workload == "same_shape":
    rng = np.random.default_rng(3)
    sources = rng.integers(3, V, (args.batch, args.src_len)).tolist()
    extra = args.decode_len - args.src_len
    dhp = DecodeHParams(beam_size=args.beam, alpha=args.alpha, extra_length=extra,
                        batch_size=args.batch, batch_tokens=0, use_cache=args.use_cache)
    reps = args.reps
    if args.no_early_eos:  # Every sentence to exactly decode_len tokens (cost curves).
      constraint = _NoEarlyEos(V, EOS_ID)
  elif args.workload == "text":
    from t2tlite.data.subword import SubwordEncoder
    encoder = SubwordEncoder(args.vocab_model)
    assert encoder.vocab_size == V, (encoder.vocab_size, V)
    lines = read_lines(args.text_file, args.lines)
    sources = [encoder.encode(line) for line in lines]
    extra = args.text_extra_length
    dhp = DecodeHParams(beam_size=args.beam, alpha=args.alpha, extra_length=extra,
                        use_cache=args.use_cache)  # Default batching.
    reps = args.text_reps
  else:  # text_fixed: the driver's batches, flattened (Decoder re-forms the same batches).
    with open(args.batches_json) as f:
      sources = [s for batch in json.load(f)["batches"] for s in batch]
    extra = args.fixed_extra_length
    dhp = DecodeHParams(beam_size=args.beam, alpha=args.alpha, extra_length=extra,
                        use_cache=args.use_cache,  # Default batching, as the driver's.
                        concurrent_batches=args.worker_concurrent_batches)
    constraint = _NoEarlyEos(V, EOS_ID)
    reps = args.fixed_reps
  decoder = Decoder(model, dhp, constraint=constraint)
  recorder = _RecordingSearch(decoder.search_ids, extra)
  decoder.search_ids = recorder
  label = f"{args.workload} {'cached' if args.use_cache else 'uncached'} xla={hp.xla}"
  res = dict(system="t2tlite", workload=args.workload, use_cache=args.use_cache, xla=hp.xla,
             tf=tf.__version__, keras=keras.__version__, beam=args.beam, alpha=args.alpha,
             extra_length=extra, batch_size=dhp.batch_size, batch_tokens=dhp.batch_tokens,
             params=int(sum(int(np.prod(v.shape)) for v in model.trainable_variables)),
             intra_op=tf.config.threading.get_intra_op_parallelism_threads(),
             inter_op=tf.config.threading.get_inter_op_parallelism_threads(),
             source_tokens=sum(len(s) for s in sources))
  res.update(time_decoding(decoder, recorder, sources, reps, label))
  res["batch_shapes"] = len(decoder.shapes_seen)  # Each one a trace (+ XLA compile).
  if args.also_lines:  # The uncached workers' subset, for a same-sentences ratio.
    subset = sources[:args.also_lines]
    sub = time_decoding(decoder, recorder, subset, reps, label + f" first {len(subset)}")
    sub["source_tokens"] = sum(len(s) for s in subset)
    res["subset"] = sub
  return res


def read_lines(path, n):
  opener = gzip.open if path.endswith(".gz") else open
  out = []
  with opener(path, "rt", encoding="utf-8") as f:
    for line in f:
      out.append(line.rstrip("\n"))
      if n and len(out) >= n:
        break
  return out


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------
def run_subprocess(label, cmd, args):
  print(f"  - {label:44s} ...", end="", flush=True)
  res, proc = run_worker(cmd, args, measure_without_wait=False)
  if "error" in res:
    return res
  if "decode_len" in res and "ms_per_loop_step" not in res:  # The peer: decode_len model calls.
    res["ms_per_loop_step"] = 1000 * res["median_s"] / res["decode_len"]
    first = [l for l in (proc.stderr or "").splitlines() if l.startswith("first (trace+compile)")]
    if first:
      res["first_call_s"] = float(first[-1].split()[-1].rstrip("s"))
  extra = ""
  if "subset" in res:
    extra = f"; first {res['subset']['sentences']}: {res['subset']['sent_per_s']:.2f} sent/s"
  print(f" {res['sent_per_s']:7.2f} sent/s {res['tok_per_s']:8.1f} tok/s (median call "
        f"{res['median_s']:.2f}s, process {res['wall_s']:.0f}s, other procs "
        f"{res['foreign_cores_during']:.2f} cores{extra})", flush=True)
  return res


def peer_config_check(args):
  """flops.py's CONFIGS['small'] beside the peer script, compared with SMALL; a note."""
  path = os.path.join(os.path.dirname(args.tfm_script), "flops.py")
  try:
    spec = importlib.util.spec_from_file_location("peer_flops", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    peer = mod.CONFIGS["small"]
  except Exception as e:  # noqa: BLE001 - only a check
    return f"could not read {path}: {e}"
  if dict(peer) != SMALL:
    sys.exit(f"the peer's config small {peer} differs from this script's {SMALL}: update SMALL")
  return f"matches {path} CONFIGS['small']"


def learn_vocabulary(args, scratch):
  """BPE vocabulary of size V from --vocab_files into scratch (untimed); its model path."""
  from t2tlite.data import subword

  def sentences():
    for path in [x for x in args.vocab_files.split(",") if x]:
      opener = gzip.open if path.endswith(".gz") else open
      with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
          if line.strip():
            yield line.strip()

  count = [0]

  def counted():
    for s in sentences():
      count[0] += 1
      yield s

  t0 = time.perf_counter()
  model_path = os.path.join(scratch, f"bpe{SMALL['V']}.model")
  subword.train_vocabulary(counted(), model_path, SMALL["V"])
  return model_path, count[0], time.perf_counter() - t0


def plan_round(args, r, vocab_model, batches_json=""):
  """[(workload, key, label, cmd)] for round r (0-based), in the order run."""
  me = [sys.executable, os.path.abspath(__file__), "--worker=ours", f"--beam={args.beam}",
        f"--alpha={args.alpha}"]
  a_common = [f"--batch={args.batch}", f"--src_len={args.src_len}",
              f"--decode_len={args.decode_len}", f"--reps={args.reps}"]
  xs = xla_values(args.xla)
  onoff = lambda x: "xla" if x else "noxla"
  a = []
  if args.tfm_python:
    a.append(("same_shape", "tfm", "Model Garden (cached beam search)", [
        args.tfm_python, args.tfm_script, "--config", "small", "--mode", "decode",
        "--beam", str(args.beam), "--batch", str(args.batch),
        "--decode_src_len", str(args.src_len), "--decode_len", str(args.decode_len),
        "--steps", str(args.tfm_steps)]))
  for x in xs:
    a.append(("same_shape", f"ours_cached_{onoff(x)}", f"t2tlite cached xla={'on' if x else 'off'}",
              me + ["--workload=same_shape", "--use_cache=true", f"--worker_xla={x}"] + a_common))
  k = r % len(a) if a else 0
  a = a[k:] + a[:k]  # Rotated each round.
  if r < args.uncached_rounds:
    for x in xs:
      a.append(("same_shape", f"ours_uncached_{onoff(x)}",
                f"t2tlite uncached xla={'on' if x else 'off'}",
                me + ["--workload=same_shape", "--use_cache=false", f"--worker_xla={x}"]
                + a_common[:-1] + [f"--reps={args.uncached_reps}"]))
  b = []
  if r < args.text_rounds:
    t_common = [f"--vocab_model={vocab_model}", f"--text_file={args.text_file}",
                f"--text_extra_length={args.text_extra_length}", f"--text_reps={args.text_reps}"]
    sub = min(args.uncached_lines, args.text_lines) if args.uncached_lines else 0
    xs = xla_values(args.text_xla)
    for x in xs:
      b.append(("text", f"ours_cached_{onoff(x)}", f"t2tlite cached xla={'on' if x else 'off'}",
                me + ["--workload=text", "--use_cache=true", f"--worker_xla={x}",
                      f"--lines={args.text_lines}", f"--also_lines={sub}"] + t_common))
    if sub:
      for x in xs:
        b.append(("text", f"ours_uncached_{onoff(x)}",
                  f"t2tlite uncached xla={'on' if x else 'off'} ({sub} lines)",
                  me + ["--workload=text", "--use_cache=false", f"--worker_xla={x}",
                        f"--lines={sub}"] + t_common))
  c = []
  if r < args.fixed_rounds and batches_json:
    if args.tfm_python:
      c.append(("text_fixed", "tfm", "Model Garden (cached beam search)", [
          args.tfm_python, args.tfm_text_script, f"--batches_json={batches_json}",
          f"--d_model={SMALL['d']}", f"--d_ff={SMALL['ff']}", f"--heads={SMALL['heads']}",
          f"--layers={SMALL['Le']}", f"--vocab={SMALL['V']}", f"--beam={args.beam}",
          f"--alpha={args.alpha}", f"--extra={args.fixed_extra_length}",
          f"--reps={args.fixed_reps}"]))
    workers = [int(n) for n in args.fixed_concurrent_batches.split(",")]
    for x in xla_values(args.fixed_xla):
      for n in workers:  # A key suffix only where several values are compared.
        suffix = f"_c{n}" if len(workers) > 1 else ""
        c.append(("text_fixed", f"ours_cached_{onoff(x)}{suffix}",
                  f"t2tlite cached xla={'on' if x else 'off'}"
                  + (f" concurrent_batches={n}" if suffix else ""),
                  me + ["--workload=text_fixed", "--use_cache=true", f"--worker_xla={x}",
                        f"--worker_concurrent_batches={n}", f"--batches_json={batches_json}",
                        f"--fixed_extra_length={args.fixed_extra_length}",
                        f"--fixed_reps={args.fixed_reps}"]))
    k = r % len(c) if c else 0
    c = c[k:] + c[:k]  # Rotated each round.
  return a + b + c


def fixed_text_batches(args, vocab_model, scratch):
  """Workload C's batches (t2t-decoder's default grouping) as a JSON file both systems read."""
  from t2tlite.data.subword import SubwordEncoder
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.decoder import length_batches
  encoder = SubwordEncoder(vocab_model)
  sources = [encoder.encode(line) for line in read_lines(args.text_file, args.fixed_lines)]
  groups = length_batches([len(s) for s in sources],
                          DecodeHParams(extra_length=args.fixed_extra_length))
  path = os.path.join(scratch, "text_fixed_batches.json")
  with open(path, "w") as f:
    json.dump(dict(batches=[[sources[i] for i in g] for g in groups]), f)
  return path, dict(sentences=sum(len(g) for g in groups), batches=len(groups),
                    source_tokens=sum(len(s) for s in sources),
                    loop_steps=sum(max(len(sources[i]) for i in g) + 1 + args.fixed_extra_length
                                   for g in groups))


def median_or_none(xs):
  xs = [x for x in xs if x is not None]
  return statistics.median(xs) if xs else None


def fmt(x, spec):
  return "-" if x is None else format(x, spec)


def ratio_pairs(keys):
  """(numerator, denominator) keys of the ratios reported, among the systems measured."""
  out = []
  for x in ("xla", "noxla"):
    if f"ours_cached_{x}" in keys and "tfm" in keys:
      out.append((f"ours_cached_{x}", "tfm"))
  for x in ("xla", "noxla"):
    if f"ours_cached_{x}" in keys and f"ours_uncached_{x}" in keys:
      out.append((f"ours_cached_{x}", f"ours_uncached_{x}"))
  for c in ("cached", "uncached"):
    if f"ours_{c}_xla" in keys and f"ours_{c}_noxla" in keys:
      out.append((f"ours_{c}_xla", f"ours_{c}_noxla"))
  for key in keys:  # --fixed_concurrent_batches compared: each against the peer and one at a time.
    base, _, workers = key.rpartition("_c")
    if base.startswith("ours_cached") and workers.isdigit():
      if "tfm" in keys:
        out.append((key, "tfm"))
      if workers != "1" and f"{base}_c1" in keys:
        out.append((key, f"{base}_c1"))
  return out


def summarize(raw, labels, workload):
  """Per system medians and per-round ratios for one workload."""
  def val(m, field, subset=False):
    if subset:
      m = m.get("subset") or ({} if m.get("use_cache", True) else m)
    return m.get(field)

  systems = {}
  for key, ms in raw.items():
    systems[key] = dict(
        label=labels[key],
        median_sent_per_s=median_or_none([val(m, "sent_per_s") for m in ms]),
        median_tok_per_s=median_or_none([val(m, "tok_per_s") for m in ms]),
        sent_per_s_per_round=[val(m, "sent_per_s") for m in ms],
        tok_per_s_per_round=[val(m, "tok_per_s") for m in ms],
        foreign_cores_per_round=[m.get("foreign_cores_during") for m in ms],
        median_warmup_s=median_or_none([m.get("warmup_s") for m in ms]),
        ms_per_loop_step=median_or_none([m.get("ms_per_loop_step") for m in ms]),
        ended_early=[m.get("ended_early") for m in ms],
        returned_short=[m.get("returned_short") for m in ms])
  ratios = {}
  for num, den in ratio_pairs(raw):
    # Text: the cached/uncached ratio compares the cached worker's subset (the same lines).
    sub = workload == "text" and "uncached" in den and "uncached" not in num
    for field in ("sent_per_s", "tok_per_s"):
      n = len(raw[den])
      per_round = []
      for i in range(n):
        a = val(raw[num][i], field, sub) if i < len(raw[num]) else None
        b = val(raw[den][i], field)
        per_round.append(a / b if (a and b) else None)
      ratios.setdefault(f"{num}/{den}", {})[field] = dict(per_round=per_round,
                                                         median=median_or_none(per_round))
  return dict(systems=systems, ratios=ratios)


def print_summary(args, summary, raw, workload):
  s = summary[workload]
  print(f"  {'system':44s} {'sent/s':>8s} {'tok/s':>9s} {'ms/step':>8s} {'warm-up s':>9s}   "
        f"sent/s per round   (cores used by other processes)")
  for key, m in s["systems"].items():
    pr = ", ".join(fmt(x, ".2f") for x in m["sent_per_s_per_round"])
    fo = ", ".join(fmt(x, ".2f") for x in m["foreign_cores_per_round"])
    print(f"  {m['label']:44s} {fmt(m['median_sent_per_s'], '8.2f')} "
          f"{fmt(m['median_tok_per_s'], '9.1f')} {fmt(m['ms_per_loop_step'], '8.1f')} "
          f"{fmt(m['median_warmup_s'], '9.1f')}   [{pr}]   ({fo})")
    if workload == "text" and key.startswith("ours_cached"):
      subs = [x.get("subset") for x in raw[workload][key] if x.get("subset")]
      if subs:
        print(f"    same {subs[0]['sentences']} first lines as uncached: "
              f"{statistics.median(x['sent_per_s'] for x in subs):.2f} sent/s, "
              f"{statistics.median(x['tok_per_s'] for x in subs):.1f} tok/s")
    early = [x for x in m["ended_early"] if x]
    short = [x for x in m["returned_short"] if x]
    if early or short:
      print(f"    note: sentences ending before their maximum length per round {m['ended_early']}"
            f"; returned ids shorter than the maximum {m['returned_short']}")
    contended = max([x for x in m["foreign_cores_per_round"] if x is not None] or [0.0])
    if contended > args.quiet_cores:
      print(f"    ^ WARNING: other processes used up to {contended:.2f} of {os.cpu_count()} "
            f"cores during these measurements")
  for name, rt in s["ratios"].items():
    r1, r2 = rt["sent_per_s"], rt["tok_per_s"]
    pr = ", ".join(fmt(x, ".3f") for x in r1["per_round"])
    print(f"  ratio {name:38s} sent/s {fmt(r1['median'], '6.3f')} [{pr}]   "
          f"tok/s {fmt(r2['median'], '6.3f')}")


def main(args):
  started = datetime.datetime.now().astimezone()
  print(f"decode speed, {started:%Y-%m-%d %H:%M %Z}; machine: {machine_info()}")
  check = peer_config_check(args) if args.tfm_python else "peer skipped"
  print(f"model: d_model {SMALL['d']}, d_ff {SMALL['ff']}, {SMALL['heads']} heads, "
        f"{SMALL['Le']}+{SMALL['Ld']} layers, vocab {SMALL['V']} ({check}); beam {args.beam}, "
        f"alpha {args.alpha}")
  scratch = tempfile.mkdtemp(prefix="decode_speed_")
  try:
    vocab_model, vocab_info = "", {}
    if args.text_rounds > 0 or args.fixed_rounds > 0:
      vocab_model, n, secs = learn_vocabulary(args, scratch)
      vocab_info = dict(sentences=n, seconds=secs, vocab_size=SMALL["V"])
      print(f"BPE vocabulary {SMALL['V']} learned from {n} sentences in {secs:.1f}s (untimed)")
    batches_json, fixed_info = "", {}
    if args.fixed_rounds > 0:
      batches_json, fixed_info = fixed_text_batches(args, vocab_model, scratch)
      print(f"(C) {fixed_info['sentences']} sentences, {fixed_info['source_tokens']} source "
            f"pieces in {fixed_info['batches']} batches, {fixed_info['loop_steps']} loop steps")
    raw = {"same_shape": {}, "text": {}, "text_fixed": {}}
    labels = {"same_shape": {}, "text": {}, "text_fixed": {}}
    for r in range(max(args.rounds, args.uncached_rounds, args.text_rounds, args.fixed_rounds)):
      plan = plan_round(args, r, vocab_model, batches_json)
      if r >= args.rounds:  # Extra rounds only for what was asked of them.
        plan = [p for p in plan if p[0] != "same_shape" or "uncached" in p[1]]
      print(f"round {r + 1}:")
      for workload, key, label, cmd in plan:
        labels[workload][key] = label
        letter = {"same_shape": "A", "text": "B", "text_fixed": "C"}[workload]
        res = run_subprocess(f"[{letter}] {label}", cmd, args)
        raw[workload].setdefault(key, []).append(res)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)

  summary = {w: summarize(raw[w], labels[w], w) for w in raw if raw[w]}
  print()
  if "same_shape" in summary:
    print(f"(A) same shape as the peer: {args.batch} random sources x {args.src_len} ids, beam "
          f"{args.beam}, decoded to {args.decode_len} tokens; ours: median of {args.reps} calls "
          f"(uncached {args.uncached_reps}), Model Garden: median of {args.tfm_steps}; median over "
          f"rounds. ms/step = call time / model calls (ours 41 incl. the forced EOS, MG 40)")
    print_summary(args, summary, raw, "same_shape")
  if "text" in summary:
    print(f"\n(B) real text: first {args.text_lines} lines of {args.text_file}, BPE {SMALL['V']}, "
          f"extra_length {args.text_extra_length}, beam {args.beam}, default batching (64 "
          f"sentences / 4096 tokens); uncached on the first {args.uncached_lines} lines only")
    print_summary(args, summary, raw, "text")
  if "text_fixed" in summary:
    print(f"\n(C) real text beside Model Garden: first {args.fixed_lines} lines of "
          f"{args.text_file}, BPE {SMALL['V']}, beam {args.beam}, no early EOS: each batch "
          f"decodes to its longest source + {args.fixed_extra_length} (+ EOS) in both; the same "
          f"batches (64 sentences / 4096 tokens); median of {args.fixed_reps} passes, median "
          f"over rounds; compare sent/s (tok/s counts Model Garden's rows to the batch length)")
    print_summary(args, summary, raw, "text_fixed")

  if args.output_json:
    flags = {k: v for k, v in vars(args).items()
             if k not in ("worker", "workload", "use_cache", "worker_xla",
                          "worker_concurrent_batches", "vocab_model", "lines", "also_lines",
                          "batches_json")}
    with open(args.output_json, "w") as f:
      json.dump(dict(started=started.isoformat(),
                     finished=datetime.datetime.now().astimezone().isoformat(),
                     machine=machine_info(), model=SMALL, vocabulary=vocab_info,
                     text_fixed=fixed_info, flags=flags,
                     summary=summary, raw=raw), f, indent=1)
    print(f"\nwrote {args.output_json}")


if __name__ == "__main__":
  ARGS = parse_args()
  if ARGS.worker == "ours":
    print(json.dumps(dict(run_ours(ARGS), peak_rss_mb=peak_rss_mb())))
  else:
    main(ARGS)
