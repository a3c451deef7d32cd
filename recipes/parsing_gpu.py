r"""Section 6.3's parser at the paper's shape (transformer_parsing) on ptb_sample, on a GPU machine without TensorFlow.

  # Here (TensorFlow): the data as the CPU recipe makes it (words in the target), training
  # batches as numpy, dev and test source ids, the decode settings and the tree constraint.
  python recipes/parsing_gpu.py prepare --data_dir=DATA --tmp_dir=../shared/data/ptb --out=PREP
  # On the GPU machine (JAX, keras and this package installed, no TensorFlow): train, then
  # decode dev and test with the paper's search under the tree constraint. Resumable.
  KERAS_BACKEND=jax python recipes/parsing_gpu.py run --prep=PREP --out=RESULTS \
      --budget_seconds=480
  # Here again: ids to trees (no repair needed: the search only writes trees), EVALB.
  python recipes/parsing_gpu.py report --prep=PREP --results=RESULTS --data_dir=DATA

recipes/ptb_sample_parsing.sh trains `transformer_parsing_tiny` (d_model 128)
for an hour on two CPU cores; this trains the paper's `transformer_parsing`
(4+4 layers, d_model 1024, 8 heads, d_ff 2048) on the same data with the
tiny set's 2048-token batches and max_length 512 (`RUN_HPARAMS`, departures
from the paper's base recipe named there) and the set's own warmup, the
paper's 4000, plus mixed_bfloat16 and packed 512-token rows (the GPU's fast
path and one compiled shape). Not the tiny set's warmup 1000: the first GPU
run (2026-11-27, docs/results.md) used it, and this shape's training loss
jumped right after that peak (3.02 at step 1000, 3.68 at 1500), as the
Table 3 run at d_model 1024 diverged at warmup 1000 and trained at 4000.
Dev and test are decoded where the model trained, with
jax_search.JaxDecoder and the problem's own decode hparams (beam 21, alpha 0.3,
input + 300, the tree constraint: `prepare` records them with the constraint's
vocabulary tables, so the GPU side needs no encoder), from the last
checkpoint; only ids travel back. Nothing is chosen on test: the run has one
configuration, and `report` scores test once.

The training batches: ptb_sample's 3,396 training trees are about 250 batches
of 2048 target tokens, so `prepare` saves --numpy_steps of them (default 1000,
four epochs) and the trainer's stream starts over in a new order after them
(numpy_batches.py): `run` trains --steps updates or until its time budget
ends, whichever comes first (on one H200, 50-60 updates a second: the budget).
Decoding both splits took 38 s there, 34 s of it compiling two batch shapes.

`run` is resumable: training resumes from its last checkpoint (t2t-trainer),
a split whose RESULTS/SPLIT_hypotheses.npz exists is not decoded again, and
RESULTS/result.json marks the run finished.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from t2tlite import files
from t2tlite.training import numpy_batches

PROBLEM = "ptb_sample"
PROBLEM_OPTIONS = "target_words=true"  # As recipes/ptb_sample_parsing.sh.
HPARAMS_SET = "transformer_parsing"
RUN_HPARAMS = ("dtype=mixed_bfloat16,batch_size=2048,"
               "max_length=512,packed_batches=true,packed_length=512")
SPLITS = ("dev", "test")
# On a GPU, 64 sentences x 21 beams are one search of 1344 rows; no token bound.
GPU_DECODE_BATCH = "batch_size=64,batch_tokens=0"


def log(message: str) -> None:
  print(f"[parsing_gpu {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _problem(data_dir: str):
  from t2tlite import registry
  problem = registry.problem(PROBLEM)
  problem.use_saved_options(data_dir)  # The options t2t-datagen wrote (target_words).
  return problem


# --- prepare (TensorFlow) ---
def prepare(args) -> None:
  """Training batches, dev/test source ids, decode hparams and the constraint, into --out."""
  from t2tlite.decoding.decode_hparams import DecodeHParams
  os.makedirs(args.out, exist_ok=True)
  batches = os.path.join(args.out, "batches")
  if not os.path.exists(os.path.join(batches, numpy_batches.MANIFEST)):  # Also generates DATA.
    subprocess.run(["t2t-datagen", f"--problem={PROBLEM}", f"--data_dir={args.data_dir}",
                    f"--tmp_dir={args.tmp_dir}", f"--problem_options={PROBLEM_OPTIONS}",
                    f"--numpy_batches={batches}", f"--hparams_set={args.hparams_set}",
                    f"--hparams={run_hparams(args.extra_hparams)}",
                    f"--numpy_steps={args.numpy_steps}"], check=True)
  problem = _problem(args.data_dir)
  encoders = problem.encoders(args.data_dir)
  decode_hparams = DecodeHParams().override(problem.default_decode_hparams)
  constraint = problem.decode_constraint(decode_hparams, encoders)
  for split in SPLITS:
    sources, _ = problem.eval_text(split, args.data_dir)
    numpy_batches.save_id_lists(os.path.join(args.out, f"{split}_sources.npz"),
                                ids=[encoders["inputs"].encode(line) for line in sources])
  with files.atomic_write(os.path.join(args.out, "decode.json")) as f:
    json.dump({"decode_hparams": problem.default_decode_hparams,
               "tree_constraint": constraint.config(), "hparams_set": args.hparams_set,
               "run_hparams": run_hparams(args.extra_hparams)}, f)
  log(f"prepared {args.out}: batches, {', '.join(SPLITS)} sources, decode settings")


def run_hparams(extra: str) -> str:
  return RUN_HPARAMS + ("," + extra if extra else "")


# --- run (JAX, no TensorFlow) ---
def run(args) -> None:
  """Trains (resuming), then decodes each split not yet decoded, within --budget_seconds."""
  start = time.time()
  if os.path.exists(os.path.join(args.out, "result.json")):
    log(f"{args.out}/result.json exists: the run is finished, nothing to do")
    return
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.prep, "decode.json")) as f:
    prepared = json.load(f)
  train_dir = os.path.join(args.out, "train")
  done_training = os.path.join(args.out, "train.done.json")
  if not os.path.exists(done_training):
    left = args.budget_seconds - args.decode_reserve_seconds
    log(f"training {prepared['hparams_set']} for {args.steps} steps (at most {left:.0f} s)")
    with open(os.path.join(args.out, "train.log"), "a") as train_log:
      status = subprocess.run(
          ["t2t-trainer", "--backend=jax", f"--numpy_batches={args.prep}/batches",
           f"--hparams_set={prepared['hparams_set']}", f"--hparams={prepared['run_hparams']}",
           f"--output_dir={train_dir}", f"--train_steps={args.steps}",
           f"--train_seconds={int(max(left, 30))}", "--eval_every=0", "--eval_steps=1",
           f"--save_checkpoints_steps={args.save_steps}", "--keep_checkpoint_max=2",
           "--average_last_n=0", "--log_every=500"],
          stdout=train_log, stderr=subprocess.STDOUT).returncode
    if status:
      raise SystemExit(f"parsing_gpu.py: t2t-trainer exited {status} (see {args.out}/train.log)")
    with files.atomic_write(done_training) as f:
      json.dump({"train_wall_seconds": time.time() - start}, f)
  decoded = decode_splits(args, prepared, train_dir)
  with open(done_training) as f:
    result = dict(json.load(f), **decoded, hparams_set=prepared["hparams_set"],
                  run_hparams=prepared["run_hparams"], target_steps=args.steps)
  result["stopped_by_time_bound"] = result["steps"] < args.steps
  with files.atomic_write(os.path.join(args.out, "result.json")) as f:
    json.dump(result, f, indent=1)
  log(f"finished: {result['steps']} steps; " + ", ".join(
      f"{s} {result[s]['sentences_per_second']:.1f} sentences/s" for s in SPLITS))


def decode_splits(args, prepared: dict, train_dir: str) -> dict:
  """Each split's beam-21 constrained decode of the last checkpoint (ids saved per split)."""
  import jax
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.jax_search import JaxDecoder
  from t2tlite.decoding.tree_constraint import TreeConstraint
  from t2tlite.training import checkpoint_manifest, run_dir

  model, checkpoint = run_dir.load_model(train_dir, hparams_overrides="packed_batches=false")
  hp = (DecodeHParams().override(prepared["decode_hparams"]).override(GPU_DECODE_BATCH)
        .override(args.decode_hparams))
  decoder = JaxDecoder(model, hp, TreeConstraint(**prepared["tree_constraint"]))
  out = {"steps": checkpoint_manifest.step_of(checkpoint),
         "checkpoint": os.path.basename(checkpoint), "params": int(model.count_params()),
         "decode_hparams": str(hp), "device": str(jax.devices()[0].device_kind)}
  for split in SPLITS:
    path = os.path.join(args.out, f"{split}_hypotheses.npz")
    timing = path + ".json"
    if not os.path.exists(timing):  # Resumable: a split decoded before is not decoded again.
      sources = numpy_batches.load_id_lists(os.path.join(args.prep, f"{split}_sources.npz"), "ids")
      if args.lines:  # A smoke test's slice; the run decodes every line.
        sources = sources[:args.lines]
      began = time.time()
      hypotheses = decoder.decode_ids(sources)
      seconds = time.time() - began
      numpy_batches.save_id_lists(path, ids=hypotheses)
      with files.atomic_write(timing) as f:
        json.dump({"lines": len(sources), "seconds": seconds,
                   "compile_seconds": decoder.first_shape_seconds,
                   "sentences_per_second": len(sources) / seconds,
                   "truncated": decoder.truncated}, f)
      decoder.first_shape_seconds = 0.0
      log(f"{split}: {len(sources)} lines in {seconds:.1f} s")
    with open(timing) as f:
      out[split] = json.load(f)
  return out


# --- report (TensorFlow) ---
def report(args) -> None:
  """Hypotheses to trees and EVALB scores (RESULTS/SPLIT.trees, RESULTS/SPLIT.evalb.json)."""
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.metrics import scoring
  problem = _problem(args.data_dir)
  target_encoder = problem.encoders(args.data_dir)["targets"]
  with open(os.path.join(args.prep, "decode.json")) as f:
    decode_hparams = DecodeHParams().override(json.load(f)["decode_hparams"])
  with open(os.path.join(args.results, "result.json")) as f:
    result = json.load(f)
  for split in SPLITS:
    sources, gold = problem.eval_text(split, args.data_dir)
    hypotheses = numpy_batches.load_id_lists(
        os.path.join(args.results, f"{split}_hypotheses.npz"), "ids")
    sources, gold = sources[:len(hypotheses)], gold[:len(hypotheses)]
    postprocess = problem.decode_postprocessor(decode_hparams)
    trees = [postprocess(line, target_encoder.decode(ids))
             for line, ids in zip(sources, hypotheses)]
    with files.atomic_write(os.path.join(args.results, f"{split}.trees")) as f:
      f.writelines(tree + "\n" for tree in trees)
    metrics = scoring.score(trees, gold, problem.eval_metrics)
    scores = dict(metrics, repairs=postprocess.summary(), lines=len(trees),
                  sentences_per_second=result[split]["sentences_per_second"],
                  decode_seconds=result[split]["seconds"], steps=result["steps"],
                  device=result["device"])
    with files.atomic_write(os.path.join(args.results, f"{split}.evalb.json")) as f:
      json.dump(scores, f, indent=1)
    log(f"{split}: " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in scores.items()))


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest="command", required=True)
  p = commands.add_parser("prepare")
  p.add_argument("--data_dir", required=True)
  p.add_argument("--tmp_dir", required=True, help="the PTB sample (../shared/data/ptb)")
  p.add_argument("--out", required=True)
  p.add_argument("--numpy_steps", type=int, default=1000, help="training batches saved")
  p.add_argument("--hparams_set", default=HPARAMS_SET, help="smoke tests: a smaller set")
  p.add_argument("--extra_hparams", default="", help="more --hparams after RUN_HPARAMS")
  r = commands.add_parser("run")
  r.add_argument("--prep", required=True)
  r.add_argument("--out", required=True)
  r.add_argument("--steps", type=int, default=100000, help="at most; the budget decides")
  r.add_argument("--save_steps", type=int, default=1000)
  r.add_argument("--budget_seconds", type=float, default=480)
  r.add_argument("--decode_reserve_seconds", type=float, default=100,
                 help="of the budget, kept for decoding dev and test (mostly compiling)")
  r.add_argument("--decode_hparams", default="", help="smoke tests: a smaller search")
  r.add_argument("--lines", type=int, default=0, help="smoke tests: the first N lines per split")
  s = commands.add_parser("report")
  s.add_argument("--prep", required=True)
  s.add_argument("--results", required=True)
  s.add_argument("--data_dir", required=True)
  args = parser.parse_args(argv)
  {"prepare": prepare, "run": run, "report": report}[args.command](args)


if __name__ == "__main__":
  main()
