"""Where a JAX training step's GPU time goes: a profiler trace of ours, summed per kernel kind
and per model part.

Why
---
bench/train_throughput.py says how fast the step is; this says where its time goes, so the
next change aims at the largest part (bench/README.md, "GPU"). It is the JAX/GPU companion of
bench/step_profile.py (TensorFlow on a CPU). Two halves, because the GPU machines have no
TensorFlow, and the reader of the trace's protobuf (XSpace) comes with TensorFlow:

  trace, on the GPU machine (JAX, no TensorFlow):
    python bench/jax_step_profile.py trace --out DIR [--length 64 --tokens 25000 --steps 3]
  builds ours at the transformer_base shape (vocabulary 37000, mixed_bfloat16, about --tokens
  target tokens per step of random ids, the step t2t-trainer --backend=jax runs), times it with
  a host sync per step and pipelined (one sync for all steps, as the trainer runs), traces
  --steps steps with jax.profiler and keeps XLA's optimized HLO of the step:
  DIR/timing.json, DIR/trace.xplane.pb.gz, DIR/step_hlo.txt.gz.

  summarize, anywhere TensorFlow is installed:
    python bench/jax_step_profile.py summarize DIR [--output_json FILE]
  per step: the busy time of the device's compute stream and its idle gaps; kernel time by
  kind (cuBLAS matmul, Triton matmul fusion, reduction, elementwise, transpose, scatter,
  copy); and by model part, from the op name XLA records in each fusion's metadata
  (the kernels of a fusion carry its name, "." written "_"). cuBLAS kernels carry only
  cuBLAS's names and are counted as "matmul (cuBLAS)". Then the host's events with the most
  time per step: where the host's call goes when it waits for every step.

On a CPU the trace half runs too (tests do, at a tiny shape), but XLA's CPU kernels are not
device events: summarize reports GPU planes only.
"""

import argparse
import collections
import glob
import gzip
import json
import os
import re
import shutil
import statistics

# --------------------------------------------------------------------------------------------
# trace
# --------------------------------------------------------------------------------------------
def trace(args):
  dump = os.path.join(args.out, "xla_dump")
  # XLA reads its flags once, when the backend starts: before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump}"
                             " --xla_dump_hlo_module_re=.*_train_step.*").strip()
  os.environ["KERAS_BACKEND"] = "jax"
  import jax
  import numpy as np
  import train_throughput as tt
  from t2tlite import registry
  from t2tlite.training.jax_step import JaxTrainer

  vocab = args.vocab
  hp = registry.hparams(args.hparams_set).replace(input_vocab_size=vocab, target_vocab_size=vocab)
  hp = hp.override(f"xla=true,dtype={args.dtype},accumulate_steps=1"
                   + (f",{args.hparams}" if args.hparams else ""))
  model, optimizer = tt.build_model(hp)
  trainer = JaxTrainer(model, optimizer, hp)
  rows = max(1, args.tokens // args.length)
  rng = np.random.default_rng(1)
  batch = {k: jax.numpy.asarray(rng.integers(2, vocab, (rows, args.length)), jax.numpy.int32)
           for k in ("inputs", "targets")}
  times, warm, _ = tt.time_steps(trainer.train_step, batch, args.warmup, args.timed_steps,
                                 "profile")
  pipelined = tt.time_pipelined(trainer.train_step, batch, args.timed_steps)

  logdir = os.path.join(args.out, "jax_trace")
  jax.profiler.start_trace(logdir)
  for _ in range(args.steps):
    float(trainer.train_step(batch)["loss"])  # One sync per step, as the bench times it.
  jax.profiler.stop_trace()
  traces = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
  _gzip(traces[0], os.path.join(args.out, "trace.xplane.pb.gz"))
  hlo = sorted(glob.glob(os.path.join(dump, "*_train_step*after_optimizations.txt")))
  if hlo:
    _gzip(hlo[0], os.path.join(args.out, "step_hlo.txt.gz"))
  shutil.rmtree(logdir, ignore_errors=True)
  shutil.rmtree(dump, ignore_errors=True)
  flops = tt.step_flops(hp, rows, args.length, args.length)
  device = jax.devices()[0]
  timing = dict(device=f"{device.platform}:{device.device_kind}", jax=jax.__version__,
                hparams_set=args.hparams_set, dtype=hp.dtype, rows=rows, length=args.length,
                vocab=vocab, flops_per_step=flops, first_step_s=warm[0] if warm else None,
                synced_step_s=statistics.median(times), pipelined_step_s=pipelined,
                traced_steps=args.steps, hlo_saved=bool(hlo))
  with open(os.path.join(args.out, "timing.json"), "w") as f:
    json.dump(timing, f, indent=1)
  print(json.dumps(timing))


def _gzip(src, dst):
  with open(src, "rb") as fin, gzip.open(dst, "wb") as fout:
    shutil.copyfileobj(fin, fout)


# --------------------------------------------------------------------------------------------
# summarize
# --------------------------------------------------------------------------------------------
def kind_of(kernel: str) -> str:
  """The kind of one kernel, from its name (XLA names a fusion by what it does)."""
  if kernel.startswith(("gemm_fusion", "triton_gemm")):
    return "matmul (Triton fusion)"
  if kernel.startswith(("nvjet", "sm90_xmma", "cutlass", "ampere_", "sm80_xmma")) or "gemm" in kernel:
    return "matmul (cuBLAS)"
  if kernel.startswith(("Memcpy", "Memset", "memcpy")):
    return "copy"
  if "transpose" in kernel:
    return "transpose"
  if "scatter" in kernel:
    return "scatter"
  if "reduce" in kernel:
    return "reduction"
  return "elementwise"


def part_of(op_name: str) -> str:
  """The model part an HLO op belongs to, from the op name in its metadata
  ("jit(_train_step)/transpose(jvp(decoder_layer_5))/feed_forward/inner/dot_general").
  First match wins: a dropout or a norm inside a sub-layer counts as dropout or norm."""
  if not op_name:
    return "unattributed"
  for part, pattern in (("dropout", "dropout"), ("norm", "_norm/"),
                        ("shared_embedding", "shared_embedding"),
                        ("feed_forward", "feed_forward"), ("attention", "attention"),
                        ("adam", "adam")):
    if pattern in op_name:
      return part
  # The loss has no layer scope: its ops sit directly under the step's (j)vp.
  if re.search(r"jvp\(\)/|transpose\(jvp\(\)\)/", op_name):
    return "loss"
  return "other"


def hlo_op_names(hlo_text: str) -> dict:
  """{instruction name: op_name of its metadata} of an optimized HLO module's text."""
  out = {}
  for match in re.finditer(r"^\s*%?([\w.\-]+) = [^\n]*?metadata=\{op_name=\"([^\"]*)\"",
                           hlo_text, re.M):
    out.setdefault(match.group(1), match.group(2))
  return out


def _op_name(kernel: str, names: dict) -> str:
  """The op name of a kernel: its fusion's, where "fusion_12" is HLO's "fusion.12"."""
  if kernel in names:
    return names[kernel]
  return names.get(re.sub(r"_(\d+)$", r".\1", kernel), "")


def read_space(trace_path: str):
  """The trace's XSpace protobuf (gzipped or not); its reader comes with TensorFlow."""
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=import-outside-toplevel
  opener = gzip.open if trace_path.endswith(".gz") else open
  space = xplane_pb2.XSpace()
  with opener(trace_path, "rb") as f:
    space.ParseFromString(f.read())
  return space


def summarize(trace_path: str, hlo_text: str = "", steps: int = 1) -> dict:
  """Per-step kernel time (ms) of each device plane's busiest stream, by kind and by part."""
  space = read_space(trace_path)
  names = hlo_op_names(hlo_text) if hlo_text else {}
  out = {}
  for plane in space.planes:
    if not plane.name.startswith("/device:GPU"):
      continue
    lines = [l for l in plane.lines if l.events]
    if not lines:
      continue
    line = max(lines, key=lambda l: sum(e.duration_ps for e in l.events))
    events = sorted((e.offset_ps, e.duration_ps, plane.event_metadata[e.metadata_id].name)
                    for e in line.events)
    by_kind, by_part = collections.Counter(), collections.Counter()
    top = collections.Counter()
    for _, ps, kernel in events:
      kind, op_name = kind_of(kernel), _op_name(kernel, names)
      by_kind[kind] += ps
      by_part["matmul (cuBLAS)" if kind == "matmul (cuBLAS)" else part_of(op_name)] += ps
      top[op_name or kernel] += ps
    busy = sum(ps for _, ps, _ in events)
    span = events[-1][0] + events[-1][1] - events[0][0]
    ms = lambda ps: ps / 1e9 / steps  # noqa: E731
    out[plane.name] = dict(
        stream=line.name, kernels_per_step=len(events) / steps, busy_ms=ms(busy),
        span_ms=ms(span), idle_ms=ms(span - busy),
        by_kind={k: ms(v) for k, v in by_kind.most_common()},
        by_part={k: ms(v) for k, v in by_part.most_common()},
        top_ops={k: ms(v) for k, v in top.most_common(15)})
  return out


def host_events(trace_path: str, steps: int = 1, top: int = 20) -> dict:
  """The host's side of the traced steps: per host plane, the event names with the most time.

  Inclusive times (an event's own and its children's), summed over the plane's threads and
  divided by `steps`, with their counts per step: how the ms of a call before the device
  starts split between jit's dispatch, the runtime's execute and the launch of XLA's command
  buffer (bench/README.md, "the state as stacks": the synced step's remaining gap).
  """
  space = read_space(trace_path)
  out = {}
  for plane in space.planes:
    if not plane.name.startswith("/host:"):
      continue
    time_ps, count = collections.Counter(), collections.Counter()
    for line in plane.lines:
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        time_ps[name] += event.duration_ps
        count[name] += 1
    if time_ps:
      out[plane.name] = {name: dict(ms=ps / 1e9 / steps, per_step=count[name] / steps)
                         for name, ps in time_ps.most_common(top)}
  return out


def print_summary(summary: dict, timing: dict, host: dict = None) -> None:
  if timing:
    print(f"{timing['device']}, {timing['hparams_set']} {timing['dtype']}, {timing['rows']} rows x "
          f"{timing['length']}: step {1e3 * timing['synced_step_s']:.1f} ms with a host sync per "
          f"step, {1e3 * timing['pipelined_step_s']:.1f} ms pipelined")
  if not summary:
    print("no GPU plane in the trace (a CPU run's kernels are not device events)")
  for plane, s in summary.items():
    print(f"{plane}, {s['stream']}: {s['kernels_per_step']:.0f} kernels per step, busy "
          f"{s['busy_ms']:.2f} ms of a {s['span_ms']:.2f} ms span (idle {s['idle_ms']:.2f})")
    for title, key in (("by kind", "by_kind"), ("by model part", "by_part"),
                       ("largest ops", "top_ops")):
      print(f"  {title}:")
      for name, value in s[key].items():
        print(f"    {value:7.2f} ms {100 * value / s['busy_ms']:5.1f}%  {name[:100]}")
  for plane, events in (host or {}).items():
    print(f"{plane}: events with the most time per step (inclusive)")
    for name, e in events.items():
      print(f"    {e['ms']:7.2f} ms {e['per_step']:7.1f}x  {name[:100]}")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = p.add_subparsers(dest="command", required=True)
  t = sub.add_parser("trace", help="on the GPU machine: time and trace the step")
  t.add_argument("--out", required=True)
  t.add_argument("--hparams_set", default="transformer_base")
  t.add_argument("--hparams", default="", help="more overrides, e.g. d_model=128")
  t.add_argument("--dtype", default="mixed_bfloat16")
  t.add_argument("--vocab", type=int, default=37000)
  t.add_argument("--length", type=int, default=64, help="source = target length")
  t.add_argument("--tokens", type=int, default=25000, help="target tokens per step")
  t.add_argument("--warmup", type=int, default=5)
  t.add_argument("--timed_steps", type=int, default=10)
  t.add_argument("--steps", type=int, default=3, help="steps traced")
  s = sub.add_parser("summarize", help="anywhere TensorFlow is installed: read a trace")
  s.add_argument("dir")
  s.add_argument("--output_json", default="")
  args = p.parse_args(argv)
  if args.command == "trace":
    os.makedirs(args.out, exist_ok=True)
    trace(args)
    return
  timing_path = os.path.join(args.dir, "timing.json")
  timing = json.load(open(timing_path)) if os.path.exists(timing_path) else {}
  hlo_path = os.path.join(args.dir, "step_hlo.txt.gz")
  hlo = gzip.open(hlo_path, "rt").read() if os.path.exists(hlo_path) else ""
  trace_path, steps = os.path.join(args.dir, "trace.xplane.pb.gz"), timing.get("traced_steps", 1)
  summary = summarize(trace_path, hlo, steps)
  host = host_events(trace_path, steps)
  print_summary(summary, timing, host)
  if args.output_json:
    with open(args.output_json, "w") as f:
      json.dump(dict(timing=timing, summary=summary, host=host), f, indent=1)


if __name__ == "__main__":
  main()
