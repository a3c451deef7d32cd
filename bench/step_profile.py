"""Where one training step's time goes: the TF profiler's op self-times, grouped by what they do.

Why
---
Before making the step faster, say where its time goes (matmuls, the softmax
over the vocabulary, layer norm, dropout masks, the optimizer, casts). This
runs the exact step t2t-trainer runs (`make_train_step` on `Transformer`, as
bench/train_throughput.py does) on random ids, profiles --steps steps with
`tf.profiler.experimental` after --warmup untimed ones, and converts the trace
with the profiler's own converter (`xprof`, from the
`tensorboard-plugin-profile` package: `pip install tensorboard-plugin-profile`,
which also shows the same trace in TensorBoard's Profile tab).

Groups (first match wins, by TensorFlow op type and name scope):
  matmul        MatMul, BatchMatMul*, Einsum, _FusedMatMul (every projection, attention's
                QK^T and AV, the tied output projection over the vocabulary)
  loss over V   everything outside the model and the optimizer: log-softmax, the target
                log-probability, argmax accuracy and their gradients over [batch, length, vocab]
  attn softmax  Softmax (and its gradient's ops) inside the attention layers
  layer norm    ops inside the *_norm layers
  dropout       random-number ops and ops inside dropout scopes
  optimizer     Adam, the global gradient norm, variable updates
  cast          Cast
  embedding     the rest of the shared embedding's ops (gather and its gradient)
  other         the remainder (residual adds, reshapes, transposes, masks)
Shares are of the summed op self-time (idle excluded). Under two threads the executor runs
independent ops side by side (the vocabulary projection's two gradient matmuls at once, the
dropout draws beside a matmul), so summed self-time is not wall time, and a group's share of
it overstates what removing that group would save. The second table is the steps' wall time,
read from the trace's timeline: each instant counts as "matmul" when a matmul runs, otherwise
it is split evenly among the groups that run, and as "idle" when no op runs (the executor's
scheduling, the Python call): what the step would lose with a group's work gone, as far as
the matmuls cannot hide it. Only the uncompiled step
(--xla false, the trainer's CPU default) can be broken down this way: with XLA
the whole update is one compiled op in the trace. In the uncompiled step the loss
is compiled alone (hparams xla_loss, on by default): its XLA executions do not
appear among the framework ops, so their wall time is read from the trace and
counted under "loss over V" (op type "XLA cluster"). --xla_loss false profiles
the loss uncompiled. --relaxed profiles the step as t2t-trainer runs it on bucketed
batches: traced once for [None, None] shapes (train_step._trace_per_shape_if_xla), where
the default traces it for the one shape profiled, which lets TensorFlow fold shapes the
relaxed graph computes at run time.

  python bench/step_profile.py --shape base --steps 3 --output_json profile.json
  # the Multi30k recipe's model on one core, about its 4096-token batches
  taskset -c 0 python bench/step_profile.py --hparams_set transformer_multi30k_wide --vocab 8000 \
      --batch 256 --length 16 --dtype mixed_bfloat16 --hparams dropout=0.3
"""

import argparse
import collections
import glob
import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RANDOM_ID_SHAPES = ("base", "tiny")  # train_throughput.SHAPES trained on random ids.
GROUPS = ("matmul", "loss over V", "attn softmax", "layer norm", "dropout", "optimizer", "cast",
          "embedding", "other")
MATMUL_TYPES = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum",
                "FusedMatMul", "FusedBatchMatMulV2")
RANDOM_TYPES = ("StatelessRandomUniformV2", "StatelessRandomGetKeyCounter", "RandomUniform",
                "StatelessRandomUniformFullIntV2", "StatelessRandomGetKeyCounterAlg")


def kernel_free(op_type: str) -> str:
  """The op under its kernel's prefix: TensorFlow rewrites ops to internal and oneDNN
  kernels (_FusedMatMul, and on AVX-512 CPUs _MklMatMul, _MklEinsum, _MklNativeFusedMatMul,
  _MklFusedBatchMatMulV2: a batched matmul with a scale or add fused in),
  which are the same matmuls."""
  return op_type.removeprefix("_").removeprefix("Mkl").removeprefix("Native")


def group_of(op_type: str, name: str) -> str:
  """The group of one TensorFlow op, from its type and its full name (scope path)."""
  lowered = name.lower()
  if kernel_free(op_type) in MATMUL_TYPES:
    return "matmul"
  if op_type == "XLA cluster":  # The only XLA cluster of an uncompiled step: the loss.
    return "loss over V"
  if op_type in RANDOM_TYPES or "dropout" in lowered:
    return "dropout"
  if ("adam" in lowered or "global_norm" in lowered
      or op_type.startswith(("Assign", "ResourceApply"))):
    return "optimizer"
  if "transformer" not in lowered:  # Not in the model: the loss, metrics and their gradients.
    return "loss over V"
  if "_norm" in lowered:
    return "layer norm"
  if "attention" in lowered and "softmax" in lowered or op_type == "Softmax":
    return "attn softmax"
  if op_type == "Cast":
    return "cast"
  if "embedding" in lowered:
    return "embedding"
  return "other"


def require_profile_reader():
  """Exits 2 with one line when xprof, the profile's reader, is missing: before the profiling."""
  import importlib.util
  if importlib.util.find_spec("xprof") is None:
    print("step_profile.py: error: reading the profile needs the xprof package "
          "(pip install xprof)", file=sys.stderr)
    sys.exit(2)


def _tool_data(xplane_paths, tool):
  """One of xprof's tools (TensorBoard's Profile tab) over the trace, as parsed JSON."""
  from xprof.convert import raw_to_tool_data
  data, _ = raw_to_tool_data.xspace_to_tool_data(xplane_paths, tool, {})
  return json.loads(data)


def read_op_stats(xplane_paths):
  """[(op type, op name, self time in microseconds)] of the profile's framework op stats."""
  table = _tool_data(xplane_paths, "framework_op_stats")[0]
  columns = [c["id"] for c in table["cols"]]
  rows = [dict(zip(columns, [c.get("v") if c else None for c in r["c"]])) for r in table["rows"]]
  return [(r["type"], r["operation"], float(r["total_self_time"])) for r in rows
          if r["type"] != "IDLE"]


STEP_EVENT = "profiled_step"  # The TraceMe around each profiled step; the trace appends its number.
XLA_RUN_EVENT = "CpuExecutable::ExecuteAsyncOnStream"  # One run of an XLA cluster: the loss.
XLA_LOSS = ("XLA cluster", "loss (xla_loss)")  # (op type, name) its runs count under.


def read_trace_events(xplane_paths):
  """The trace viewer's events (TensorBoard's timeline), converted once for every reader below."""
  return _tool_data(xplane_paths, "trace_viewer").get("traceEvents", [])


def read_xla_cluster_time(events):
  """[("XLA cluster", name, microseconds)]: the wall time of every XLA executable run.

  An uncompiled step's XLA clusters (the loss with xla_loss) run inside one
  TensorFlow op whose time the framework op statistics leave out; the trace
  viewer's events hold it, as `XLA_RUN_EVENT`.
  """
  total = sum(e.get("dur", 0.0) for e in events
              if e.get("ph") == "X" and e.get("name") == XLA_RUN_EVENT)
  return [XLA_LOSS + (float(total),)] if total else []


def read_timeline(events):
  """(op intervals [(group, start, end)], step spans [(start, end)]), microseconds.

  Ops are the trace's TensorFlow op events (each names its op as "name:type") and its
  XLA cluster runs; spans are the `STEP_EVENT` annotations `profile` puts around steps.
  """
  intervals, spans = [], []
  for event in events:
    if event.get("ph") != "X":
      continue
    start, end = float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0.0))
    long_name = event.get("args", {}).get("long_name", "")
    if event.get("name", "").split(" ")[0] == STEP_EVENT:
      spans.append((start, end))
    elif event.get("name") == XLA_RUN_EVENT:
      intervals.append((group_of(*XLA_LOSS), start, end))
    elif ":" in long_name:
      name, op_type = long_name.rsplit(":", 1)
      intervals.append((group_of(op_type, name), start, end))
  return intervals, spans


def wall_shares(intervals, spans):
  """{group or "idle": microseconds}: the spans' wall time, split as the module doc says.

  One sweep over the intervals' ends, clipped to each span: between two consecutive
  ends the set of running groups is fixed, and that stretch goes to "matmul" if one
  runs, else evenly to the running groups, else to "idle". The values sum to the
  spans' total length.
  """
  wall = collections.Counter()
  for span_start, span_end in spans:
    edges = []
    for group, start, end in intervals:
      start, end = max(start, span_start), min(end, span_end)
      if end > start:
        edges += [(start, 1, group), (end, -1, group)]
    edges.sort(key=lambda edge: edge[0])
    running = collections.Counter()
    now = span_start
    for at, change, group in edges + [(span_end, 0, None)]:
      if at > now:
        active = [g for g, n in running.items() if n > 0]
        if "matmul" in active:
          wall["matmul"] += at - now
        elif active:
          for g in active:
            wall[g] += (at - now) / len(active)
        else:
          wall["idle"] += at - now
        now = at
      if group is not None:
        running[group] += change
  return dict(wall)


def wall_table(wall, steps):
  """wall_shares' microseconds as {group: share, ms per step}, every group of GROUPS and "idle"."""
  total = sum(wall.values())
  return {g: dict(share=wall.get(g, 0.0) / total, ms_per_step=wall.get(g, 0.0) / 1e3 / steps)
          for g in GROUPS + ("idle",)}


def shares(op_stats):
  """{group: share of the summed self-time}, plus the top ops of each group."""
  by_group = collections.Counter()
  top = collections.defaultdict(collections.Counter)
  for op_type, name, micros in op_stats:
    group = group_of(op_type, name)
    by_group[group] += micros
    top[group][op_type] += micros
  total = sum(by_group.values())
  return total, {g: dict(share=by_group[g] / total if total else 0.0,
                         ms=by_group[g] / 1e3,
                         top_ops={k: round(v / total, 4) for k, v in top[g].most_common(5)})
                 for g in GROUPS}


def profile(args):
  import numpy as np
  import tensorflow as tf
  from t2tlite import registry
  from t2tlite.training import distribution
  from train_throughput import SHAPES, build_tf_step

  strategy = distribution.make_strategy(cpu_devices=1)
  name, vocab = SHAPES[args.shape][:2]
  name, vocab = args.hparams_set or name, args.vocab or vocab
  overrides = f"xla={'true' if args.xla else 'false'},dtype={args.dtype},xla_loss={args.xla_loss}"
  hp = registry.hparams(name).replace(input_vocab_size=vocab, target_vocab_size=vocab).override(
      ",".join(filter(None, (overrides, args.hparams))))
  _, step = build_tf_step(hp, strategy)
  rng = np.random.default_rng(1)

  def random_batch(rows, length):
    return {key: tf.constant(rng.integers(2, vocab, (rows, length)), tf.int32)
            for key in ("inputs", "targets")}

  batch = random_batch(args.batch, args.length)
  if args.relaxed:  # Two other shapes first: then traced [None, None], as the trainer's step.
    for rows, length in ((args.batch // 2, args.length * 2), (args.batch + 8, args.length - 2)):
      float(step(random_batch(rows, length))["loss"])
  for i in range(args.warmup):
    float(step(batch)["loss"])
    print(f"warm-up step {i + 1}/{args.warmup}", file=sys.stderr, flush=True)
  logdir = args.logdir or tempfile.mkdtemp(prefix="step_profile-")
  tf.profiler.experimental.start(logdir)
  for i in range(args.steps):
    with tf.profiler.experimental.Trace(STEP_EVENT, step_num=i, _r=1):
      float(step(batch)["loss"])
    print(f"profiled step {i + 1}/{args.steps}", file=sys.stderr, flush=True)
  tf.profiler.experimental.stop()
  return logdir, glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shape", default="base", choices=RANDOM_ID_SHAPES)
  parser.add_argument("--hparams_set", default="",
                      help="a registered set to profile instead of --shape's (random ids too), "
                           "e.g. transformer_multi30k_wide, the Multi30k recipe's model")
  parser.add_argument("--vocab", type=int, default=0, help="vocabulary size (default: --shape's)")
  parser.add_argument("--hparams", default="", help="more overrides, as t2t-trainer's --hparams")
  parser.add_argument("--dtype", default="float32")
  parser.add_argument("--xla", default="false", choices=("true", "false"))
  parser.add_argument("--xla_loss", default="true", choices=("true", "false"),
                      help="hparams xla_loss: the loss compiled alone in the uncompiled step")
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--length", type=int, default=32, help="source = target length")
  parser.add_argument("--relaxed", action="store_true",
                      help="profile the step traced shape-relaxed ([None, None] batches), as "
                           "t2t-trainer runs it from its second batch shape on; by default the "
                           "step is traced for the one shape profiled")
  parser.add_argument("--warmup", type=int, default=2)
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--logdir", default="", help="keep the trace here (TensorBoard's Profile)")
  parser.add_argument("--output_json", default="")
  args = parser.parse_args()
  require_profile_reader()
  args.xla = args.xla == "true"
  logdir, paths = profile(args)
  if not paths:
    sys.exit(f"no profile was written under {logdir}")
  events = read_trace_events(paths)
  total, table = shares(read_op_stats(paths) + read_xla_cluster_time(events))
  relaxed = ", traced shape-relaxed" if args.relaxed else ""
  print(f"{args.hparams_set or args.shape} step, {args.dtype}, xla {'on' if args.xla else 'off'}, "
        f"xla_loss {args.xla_loss}, batch {args.batch} x {args.length}{relaxed}: "
        f"{total / 1e3 / args.steps:.0f} ms of op self-time per step")
  for group, row in table.items():
    ops = ", ".join(f"{k} {v:.1%}" for k, v in row["top_ops"].items())
    print(f"  {group:13s} {row['share']:6.1%}   {ops}")
  wall = wall_shares(*read_timeline(events))
  wall_total = sum(wall.values())
  by_group = wall_table(wall, args.steps)
  print(f"wall time: {wall_total / 1e3 / args.steps:.0f} ms per step; a matmul runs "
        f"{by_group['matmul']['share']:.1%} of it; the rest, by what runs then:")
  for group, row in by_group.items():
    if group != "matmul":
      print(f"  {group:13s} {row['share']:6.1%}   {row['ms_per_step']:.1f} ms")
  if args.output_json:
    with open(args.output_json, "w") as f:
      json.dump(dict(flags=vars(args), logdir=logdir, ms_per_step=total / 1e3 / args.steps,
                     groups=table, wall_ms_per_step=wall_total / 1e3 / args.steps,
                     wall=by_group), f, indent=1)


if __name__ == "__main__":
  main()
