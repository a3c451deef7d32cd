"""How cost grows: base training tokens/s and peak memory vs batch and length; decode vs length.

Why
---
A user sizing a run wants to know what doubling the batch or the maximum length costs in speed
and memory before the first out-of-memory or the first slow night. This script measures it on
this machine, with the step t2t-trainer runs and the search t2t-decoder runs.

What is measured
----------------
Training (the transformer_base shape, vocabulary --vocab, --dtype, hparams xla --xla: false is
t2t-trainer's CPU choice): each point is one fresh process running bench/train_throughput.py's
worker (the trainer's own step, random ids, no padding) on rows of `length` source and target
tokens, `tokens // length` rows per step. Two curves:
  * batch: --batch_tokens (1024, 2048, 4096, 8192 target tokens per step) at --batch_length (64);
  * length: --lengths (64, 128, 256) at --length_tokens (4096) tokens per step.
Per point: target tokens/s (median of --steps timed steps after --warmup), the achieved matmul
GFLOP/s (../shared/peers/flops.py's formula), and the process's peak RSS (ru_maxrss: the model,
the optimizer's slots, the activations kept for the backward pass, TensorFlow itself).

Decoding: bench/decode_speed.py's worker (its model: d_model 256, 3+3 layers, vocabulary 8000,
randomly initialized; cached beam search, --beam 4, alpha 0.6, compiled as t2t-decoder compiles
it) on --decode_batch random sources of each length in --decode_lengths, every sentence decoded
to exactly its length + --decode_extra tokens (no early EOS, as a random model would otherwise
end anywhere): seconds per call, milliseconds per loop step, sentences/s, peak RSS.

Every point is a separate process, so memory figures do not mix and a crash costs one point.
Points are written to --output_json as they finish; rerunning with the same flags skips the
points already there (a killed run resumes). The host is shared: each point records the CPU
other processes used while it ran, and the table flags points above --quiet_cores.

Usage:
  python bench/cost_curves.py --output_json cost.json --plot docs/img/cost_curves.png
  python bench/cost_curves.py --batch_tokens 256,512 --lengths 16,32 --length_tokens 512 \\
      --vocab 1000 --decode_lengths 4,8 --decode_batch 2 --output_json quick.json   # ~3 min
Prints a Markdown table per curve.
"""

import argparse
import datetime
import json
import os
import sys

from bench_util import machine_info, run_worker, str2bool

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--batch_tokens", default="1024,2048,4096,8192", type=int_list,
                 help="batch curve: target tokens per step")
  p.add_argument("--batch_length", type=int, default=64, help="batch curve: row length")
  p.add_argument("--lengths", default="64,128,256", type=int_list, help="length curve: row lengths")
  p.add_argument("--length_tokens", type=int, default=4096,
                 help="length curve: target tokens per step")
  p.add_argument("--vocab", type=int, default=37000, help="shared vocabulary (the paper's en-de)")
  p.add_argument("--dtype", default="float32")
  p.add_argument("--xla", type=str2bool, default=False)
  p.add_argument("--warmup", type=int, default=1)
  p.add_argument("--steps", type=int, default=2)
  p.add_argument("--decode_lengths", default="8,16,32,64,128", type=int_list)
  p.add_argument("--decode_batch", type=int, default=16)
  p.add_argument("--decode_extra", type=int, default=50, help="the paper's maximum: input + 50")
  p.add_argument("--decode_reps", type=int, default=1)
  p.add_argument("--beam", type=int, default=4)
  p.add_argument("--output_json", required=True,
                 help="points written as they finish; existing points with the same flags are kept")
  p.add_argument("--plot", default="", help="PNG of the three curves (needs matplotlib)")
  p.add_argument("--timeout", type=int, default=1800, help="seconds per point")
  p.add_argument("--quiet_wait", type=float, default=0.0)
  p.add_argument("--quiet_cores", type=float, default=0.3)
  p.add_argument("--verbose", action="store_true", help="pass the workers' stderr through")
  return p.parse_args(argv)


def int_list(text):
  """argparse type of the comma-list flags: parsed once, named in argparse's error."""
  try:
    return [int(x) for x in text.split(",") if x.strip()]
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}")


def plan(args):
  """[(name, curve, cmd, env)]: every point, training first, each once."""
  points, seen = [], set()
  train = ([("--batch_tokens / --batch_length", t, args.batch_length) for t in args.batch_tokens]
           + [("--length_tokens / --lengths", args.length_tokens, n) for n in args.lengths])
  for flags, tokens, length in train:
    if tokens < length:
      sys.exit(f"{flags}: {tokens} tokens per step is less than one row of {length}")
    name = f"train@{tokens}x{length}"
    if name in seen:
      continue
    seen.add(name)
    points.append((name, "train", [
        sys.executable, os.path.join(HERE, "train_throughput.py"), "--worker=ours",
        "--shape=base", f"--base_vocab={args.vocab}", f"--batch={tokens // length}",
        f"--src_len={length}", f"--tgt_len={length}", f"--warmup={args.warmup}",
        f"--steps={args.steps}", "--backend=tensorflow", f"--dtype={args.dtype}",
        f"--xla={args.xla}", "--devices=1", "--accumulate=1"],
        {"KERAS_BACKEND": "tensorflow"}))
  for n in args.decode_lengths:
    points.append((f"decode@{n}", "decode", [
        sys.executable, os.path.join(HERE, "decode_speed.py"), "--worker=ours",
        "--workload=same_shape", f"--batch={args.decode_batch}", f"--src_len={n}",
        f"--decode_len={n + args.decode_extra}", f"--reps={args.decode_reps}",
        f"--beam={args.beam}", "--use_cache=true", "--worker_xla=true", "--no_early_eos=true"],
        {"KERAS_BACKEND": "tensorflow"}))
  return points


def settings(args):
  """The flags a point's result depends on: a stored point is reused only if they match."""
  keep = ("vocab", "dtype", "xla", "warmup", "steps", "decode_batch", "decode_extra",
          "decode_reps", "beam")
  return {k: getattr(args, k) for k in keep}


def load_done(args):
  if not os.path.exists(args.output_json):
    return {}
  with open(args.output_json) as f:
    stored = json.load(f)
  if stored.get("settings") != settings(args):
    sys.exit(f"--output_json: {args.output_json} holds points measured with other settings "
             f"({stored.get('settings')}); give another path or delete it")
  return {name: p for name, p in stored.get("points", {}).items() if "error" not in p}


def save(args, points, started):
  tmp = args.output_json + ".tmp"
  with open(tmp, "w") as f:
    json.dump(dict(started=started, machine=machine_info(), settings=settings(args),
                   flags=vars(args), points=points), f, indent=1)
  os.replace(tmp, args.output_json)


def train_row(p):
  return (f"| {p['batch'] * p['tgt_len']} | {p['tgt_len']} | {p['batch']} | "
          f"{p['tgt_tok_per_s']:.0f} | {p['median_step_s']:.2f} | {p['achieved_gflops']:.0f} | "
          f"{p['peak_rss_mb'] / 1024:.2f} | {p['foreign_cores_during']:.2f} |")


def print_tables(args, points):
  header = ("| target tokens / step | length | rows | target tok/s | step s | GFLOP/s | "
            "peak RSS GiB | other procs (cores) |\n|---|---|---|---|---|---|---|---|")
  batch = [points.get(f"train@{t}x{args.batch_length}")
           for t in args.batch_tokens]
  length = [points.get(f"train@{args.length_tokens}x{n}") for n in args.lengths]
  print(f"\nTraining, batch curve (length {args.batch_length}; {args.dtype}, xla {args.xla}):")
  print(header)
  for p in batch:
    if p:
      print(train_row(p))
  print(f"\nTraining, length curve ({args.length_tokens} target tokens per step):")
  print(header)
  for p in length:
    if p:
      print(train_row(p))
  print(f"\nDecoding (beam {args.beam}, {args.decode_batch} sentences, each to its length + "
        f"{args.decode_extra}):")
  print("| source length | decode s | ms / loop step | sentences/s | peak RSS GiB | other procs |\n"
        "|---|---|---|---|---|---|")
  for n in args.decode_lengths:
    p = points.get(f"decode@{n}")
    if p:
      print(f"| {n} | {p['median_s']:.2f} | {p['ms_per_loop_step']:.1f} | {p['sent_per_s']:.2f} | "
            f"{p['peak_rss_mb'] / 1024:.2f} | {p['foreign_cores_during']:.2f} |")


def plot(args, points):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))

  def train_panel(ax, names, xs, xlabel, title):
    got = [(x, points[n]) for x, n in zip(xs, names) if n in points]
    if not got:
      return
    ax.plot([x for x, _ in got], [p["tgt_tok_per_s"] for _, p in got], "o-", color="C0")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("target tokens/s", color="C0")
    ax.set_xscale("log", base=2)
    ax.set_xticks([x for x, _ in got], [str(x) for x, _ in got])
    ax.set_ylim(bottom=0)
    twin = ax.twinx()
    twin.plot([x for x, _ in got], [p["peak_rss_mb"] / 1024 for _, p in got], "s--", color="C3")
    twin.set_ylabel("peak RSS (GiB)", color="C3")
    twin.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)

  tokens = args.batch_tokens
  train_panel(axes[0], [f"train@{t}x{args.batch_length}" for t in tokens], tokens,
              "target tokens per step", f"training, rows of {args.batch_length}")
  lengths = args.lengths
  train_panel(axes[1], [f"train@{args.length_tokens}x{n}" for n in lengths], lengths,
              "row length (tokens)", f"training, {args.length_tokens} tokens per step")
  dl = [n for n in args.decode_lengths if f"decode@{n}" in points]
  if dl:
    ax = axes[2]
    ax.plot(dl, [points[f"decode@{n}"]["median_s"] for n in dl], "o-", color="C2")
    ax.set_xscale("log", base=2)
    ax.set_xticks(dl, [str(n) for n in dl])
    ax.set_xlabel("source length (tokens)")
    ax.set_ylabel("seconds per batch", color="C2")
    ax.set_ylim(bottom=0)
    ax.set_title(f"beam-{args.beam} decoding, {args.decode_batch} sentences to length + "
                 f"{args.decode_extra}", fontsize=10)
  fig.suptitle(f"transformer_base shape training ({args.dtype}); decoding: small shape; "
               "one fresh process per point", fontsize=10)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
  fig.savefig(args.plot, dpi=80)
  print(f"wrote {args.plot}")


def main(args):
  started = datetime.datetime.now().astimezone().isoformat()
  print(f"cost curves, {started}; machine: {machine_info()}")
  points = load_done(args)
  todo = [p for p in plan(args) if p[0] not in points]
  print(f"{len(points)} points already measured in {args.output_json}; {len(todo)} to run")
  for name, _, cmd, env in todo:
    print(f"  - {name:24s} ...", end="", flush=True)
    res, _ = run_worker(cmd, args, env=env)
    if "error" not in res:
      rate = (f"{res['tgt_tok_per_s']:.0f} tok/s" if name.startswith("train")
              else f"{res['median_s']:.2f} s/call")
      print(f" {rate}, peak RSS {res['peak_rss_mb'] / 1024:.2f} GiB "
            f"(other procs {res['foreign_cores_during']:.2f} cores)", flush=True)
    points[name] = res
    save(args, points, started)
  print_tables(args, points)
  if args.plot:
    plot(args, points)
  failed = [n for n, p in points.items() if "error" in p]
  if failed:
    sys.exit(f"points that failed (rerun to retry them): {', '.join(failed)}")


if __name__ == "__main__":
  main(parse_args())
