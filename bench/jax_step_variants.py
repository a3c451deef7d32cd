"""Variants of our JAX training step timed in one process, in rotated rounds.

Why
---
On a GPU machine, separate processes running the same step differ by a few percent
(bench/README.md, "GPU: one H200 ... Adam's moments as two buffers"): as much as a lever
moves the step. One process holding every variant, each compiled once and then timed in
turn, round after round in rotated order, is the comparison that sees a few percent. It is
the committed form of the script behind that section's table.

A variant is NAME or NAME:KEY=VALUE,KEY=VALUE. Keys starting with `xla_` are XLA options for
compiling that variant's step (`jax.jit(compiler_options=...)`, the per-program form of
XLA_FLAGS; true/false are booleans); `step_module=FILE` takes the JaxTrainer of that file (a
jax_step.py of another revision, `git show REV:t2tlite/training/jax_step.py > FILE`), so a
change to the step is measured against the step before it in one process; other keys
override hparams (that variant then builds its own model, from the same seed). The first
variant is the reference of the ratios.

    python bench/jax_step_variants.py --variant base \\
        --variant no_command_buffers:xla_gpu_enable_command_buffer= \\
        --variant no_dropout:dropout=0.0 --length 64 --tokens 25000 --peak_tflops 989 \\
        --output_json OUT.json

Per variant: target tokens/s with a host sync per step (the peers' method) and pipelined
(steps back to back, one sync: how t2t-trainer runs), MFU with --peak_tflops (the FLOP formula
of bench/train_throughput.py), the host's call time (until train_step returns), the first step
(compiling), and per round its ratio to the first variant. Imports no TensorFlow, so it runs on
the GPU machines (JAX only).
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time


def parse_variant(text):
  """"NAME[:KEY=VALUE,...]" -> (name, XLA options, hparams overrides, step module file or "")."""
  name, _, spec = text.partition(":")
  if not name:
    raise SystemExit(f"--variant {text!r}: a name comes first (NAME or NAME:KEY=VALUE,...)")
  options, overrides, step_module = {}, [], ""
  for item in filter(None, spec.split(",")):
    key, eq, value = item.partition("=")
    if not eq:
      raise SystemExit(f"--variant {text!r}: {item!r} is not KEY=VALUE")
    if key.startswith("xla_"):
      options[key] = {"true": True, "false": False}.get(value.lower(), value)
    elif key == "step_module":
      if not os.path.isfile(value):
        raise SystemExit(f"--variant {text!r}: step_module {value!r} is not a file")
      step_module = value
    else:
      overrides.append(item)
  return name, options, ",".join(overrides), step_module


def trainer_class(step_module):
  """JaxTrainer of the given jax_step.py file (loaded as a module of its own), or the package's."""
  if not step_module:
    from t2tlite.training.jax_step import JaxTrainer
    return JaxTrainer
  name = "step_variant_" + "".join(c if c.isalnum() else "_" for c in step_module)
  spec = importlib.util.spec_from_file_location(name, step_module)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.JaxTrainer


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--variant", action="append", required=True,
                 help="NAME or NAME:KEY=VALUE,... (xla_* keys: XLA options; others: hparams)")
  p.add_argument("--hparams_set", default="transformer_base")
  p.add_argument("--vocab", type=int, default=37000)
  p.add_argument("--dtype", default="mixed_bfloat16")
  p.add_argument("--length", type=int, default=64, help="source = target length")
  p.add_argument("--tokens", type=int, default=25000, help="about this many target tokens a step")
  p.add_argument("--warmup", type=int, default=5, help="untimed steps after compiling")
  p.add_argument("--steps", type=int, default=20, help="timed steps per variant per round")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--peak_tflops", type=float, default=0.0, help="adds MFU against this peak")
  p.add_argument("--output_json", default="")
  args = p.parse_args()
  variants = [parse_variant(v) for v in args.variant]
  names = [v[0] for v in variants]
  if len(set(names)) != len(names):
    raise SystemExit(f"--variant: names repeat: {names}")

  os.environ["KERAS_BACKEND"] = "jax"
  import jax
  import jax.numpy as jnp
  import numpy as np
  import train_throughput as tt
  from t2tlite import registry

  base = registry.hparams(args.hparams_set).replace(input_vocab_size=args.vocab,
                                                    target_vocab_size=args.vocab)
  base = base.override(f"xla=true,dtype={args.dtype},accumulate_steps=1")
  rows = max(1, args.tokens // args.length)
  tokens = rows * args.length
  rng = np.random.default_rng(1)
  batch = {k: jnp.asarray(rng.integers(2, args.vocab, (rows, args.length)), jnp.int32)
           for k in ("inputs", "targets")}
  shared = tt.build_model(base)  # Variants that change no hparams share one model.
  trainers, results = {}, {}
  for name, options, overrides, step_module in variants:
    hp = base.override(overrides) if overrides else base
    model, optimizer = tt.build_model(hp) if overrides else shared
    trainer = trainer_class(step_module)(model, optimizer, hp, compiler_options=options or None)
    _, first, _ = tt.time_steps(trainer.train_step, batch, 1, args.warmup, name)  # 1st: compiling
    trainers[name] = trainer
    results[name] = dict(xla_options=options, hparams=overrides, step_module=step_module,
                         first_step_s=first[0],
                         flops_per_step=tt.step_flops(hp, rows, args.length, args.length),
                         synced_s=[], pipelined_s=[], call_s=[])
    print(f"{name}: first step (compiling) {first[0]:.1f} s", file=sys.stderr, flush=True)
  tt.time_steps(trainers[names[0]].train_step, batch, 0, args.steps, "clocks up")
  for r in range(args.rounds):
    for name in names[r % len(names):] + names[:r % len(names)]:
      trainer, res = trainers[name], results[name]
      calls = []
      times, _, _ = tt.time_steps(trainer.train_step, batch, 0, args.steps, name, calls)
      res["synced_s"].append(statistics.median(times))
      res["call_s"].append(statistics.median(calls))
      res["pipelined_s"].append(tt.time_pipelined(trainer.train_step, batch, args.steps))

  reference = results[names[0]]
  for name in names:
    res = results[name]
    synced, piped = statistics.median(res["synced_s"]), statistics.median(res["pipelined_s"])
    res.update(synced_tgt_tok_per_s=tokens / synced, pipelined_tgt_tok_per_s=tokens / piped,
               call_ms=1e3 * statistics.median(res["call_s"]),
               ratio_per_round=[b / a for a, b in zip(res["synced_s"], reference["synced_s"])],
               pipelined_ratio_per_round=[b / a for a, b in zip(res["pipelined_s"],
                                                                reference["pipelined_s"])])
    if args.peak_tflops:
      res.update(synced_mfu=res["flops_per_step"] / synced / 1e12 / args.peak_tflops,
                 pipelined_mfu=res["flops_per_step"] / piped / 1e12 / args.peak_tflops)
  device = jax.devices()[0]
  out = dict(device=f"{device.platform}:{device.device_kind}", jax=jax.__version__,
             hparams_set=args.hparams_set, dtype=args.dtype, rows=rows, length=args.length,
             vocab=args.vocab, rounds=args.rounds, steps=args.steps, variants=results,
             tensorflow_loaded=any(m.split(".")[0] == "tensorflow" for m in sys.modules),
             finished=time.strftime("%Y-%m-%d %H:%M:%S"))
  if args.output_json:
    with open(args.output_json, "w") as f:
      json.dump(out, f, indent=1)
  print(f"{out['device']}, {args.hparams_set} {args.dtype}, {rows} rows x {args.length}, "
        f"{args.rounds} rounds of {args.steps} steps; ratios to {names[0]!r}, per round")
  for name in names:
    res = results[name]
    mfu = lambda key: f" ({res[key]:.1%})" if key in res else ""  # noqa: E731
    print(f"  {name:24s} synced {res['synced_tgt_tok_per_s']:>12,.0f}{mfu('synced_mfu')}  "
          f"pipelined {res['pipelined_tgt_tok_per_s']:>12,.0f}{mfu('pipelined_mfu')}  "
          f"call {res['call_ms']:.2f} ms  first step {res['first_step_s']:.1f} s  x "
          + " ".join(f"{x:.3f}" for x in res["ratio_per_round"]))


if __name__ == "__main__":
  main()
