r"""Table 3's rows at the paper's own shapes on Multi30k, trained on a GPU machine without TensorFlow.

  # Here (TensorFlow): the data, the training batches as numpy, dev's ids.
  python recipes/table3_gpu.py prepare --data_dir=DATA --tmp_dir=../shared/data/multi30k \
      --out=PREP --steps=3000
  # On the GPU machine (JAX, keras and this package installed, no TensorFlow): train and
  # evaluate every run, six at once, resumable.
  python recipes/table3_gpu.py run --prep=PREP --out=RESULTS --steps=3000 \
      --budget_seconds=450 --parallel=6
  # A variation of some rows, under its own run names:
  python recipes/table3_gpu.py run --prep=PREP --out=RESULTS --steps=3000 \
      --rows=base.seed1,d1024 --extra_hparams=learning_rate_warmup_steps=4000 \
      --suffix=.w4000 --parallel=2 --budget_seconds=300
  # Here again: hypotheses to text, BLEU as the miniature sweep scores it, the page's table.
  python recipes/table3_gpu.py report --prep=PREP --results=RESULTS --data_dir=DATA \
      --page=docs/table3.md

The miniature sweep (table3_sweep.py) scales every row down to what two CPU
cores train; this trains the base row, row A's h=1 and h=16 and row C's
d_model=1024 as the paper sized them (transformer_base, transformer_base_h1,
transformer_base_h16, transformer_base_d1024), on the same Multi30k en-de data
and 8000-piece vocabulary, and measures them the same way: dev perplexity per
subword token (exp of the teacher-forced NLL over all of val), dev BLEU of a
beam-4 / alpha 0.6 / +50 decode of the last checkpoint (no averaging), never
test. Every row trains for the same number of steps (--steps), with one seed;
the base row gets more seeds if the budget allows (the seed spread).

Training settings shared by every row (`ROW_HPARAMS`), each a departure from
the paper named here: mixed_bfloat16 (the GPU's fast path; the paper trained
in float32 on P100s); packed 128-token rows (t2t's packed problems: the same
per-pair loss, one compiled shape); warmup 1000 as the miniature base, for a
run of thousands of steps, not the paper's 4000 of 100K; batches of 4096 tokens
per side (transformer_base's per-device batch_size; the paper's 8 GPUs held
~25000). Dev is decoded where the rows trained, with jax_search.JaxDecoder
(t2t-decoder's search), so only ids travel back, not checkpoints of 0.5-2 GB.

`run` is resumable: a row is finished when RESULTS/NAME/result.json exists; a
rerun starts the others, and stops starting rows when the budget left is
below a row's estimated cost (from the base row's own time).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from t2tlite import files
from t2tlite.training import numpy_batches

PROBLEM = "multi30k_ende"
DECODE_HPARAMS = "beam_size=4,alpha=0.6,extra_length=50"  # Section 6: beam 4, alpha 0.6, +50.
# On a GPU all of dev is one batch, one compiled shape (the CPU defaults: 64 sentences / 4096 tokens).
GPU_DECODE_BATCH = "batch_size=1024,batch_tokens=0"
ROW_HPARAMS = ("dtype=mixed_bfloat16,packed_batches=true,packed_length=128,"
               "learning_rate_warmup_steps=1000")
# (run name, registered set, seed, cost per step relative to base), in the order they run.
RUNS = (("base.seed1", "transformer_base", 1, 1.0), ("h1", "transformer_base_h1", 1, 1.0),
        ("h16", "transformer_base_h16", 1, 1.1), ("d1024", "transformer_base_d1024", 1, 2.6),
        ("base.seed2", "transformer_base", 2, 1.0), ("base.seed3", "transformer_base", 3, 1.0))
EVAL_RESERVE_SECONDS = 100  # Of a row's budget, kept for the dev pass and decode (mostly compiling).
DEV_ROWS = 256  # Teacher-forced dev batches: rows x the longest dev pair (one compiled shape).


def log(message: str) -> None:
  print(f"[table3_gpu {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- prepare (TensorFlow) ---
def prepare(args) -> None:
  """Training batches as numpy (t2t-datagen --numpy_batches) and dev's ids, into --out."""
  from t2tlite import registry
  os.makedirs(args.out, exist_ok=True)
  batches = os.path.join(args.out, "batches")
  if not os.path.exists(os.path.join(batches, "batches.json")):  # Also generates DATA.
    subprocess.run(["t2t-datagen", f"--problem={PROBLEM}", f"--data_dir={args.data_dir}",
                    f"--tmp_dir={args.tmp_dir or args.data_dir}", f"--numpy_batches={batches}",
                    "--hparams_set=transformer_base", f"--hparams={ROW_HPARAMS}",
                    f"--numpy_steps={args.steps}"], check=True)
  problem = registry.problem(PROBLEM)
  sources, references = problem.eval_text("dev", args.data_dir)
  encoders = problem.encoders(args.data_dir)
  pairs = [(encoders["inputs"].encode(s), encoders["targets"].encode(t))
           for s, t in zip(sources, references)]
  numpy_batches.save_id_lists(os.path.join(args.out, "dev_ids.npz"),
                              inputs=[p[0] for p in pairs], targets=[p[1] for p in pairs])
  log(f"dev: {len(pairs)} pairs; training batches in {batches}")


# --- run (JAX, no TensorFlow) ---
def run(args) -> None:
  """Trains and evaluates each unfinished row, within --budget_seconds."""
  os.makedirs(args.out, exist_ok=True)
  if args.parallel > 1:
    run_in_parallel(args)
    return
  start = time.time()
  base_seconds = None
  hparams = row_hparams(args)
  for row, hparams_set, seed, cost in RUNS:
    if row not in args.rows.split(","):
      continue
    name = row + args.suffix
    out = os.path.join(args.out, name)
    result_path = os.path.join(out, "result.json")
    if os.path.exists(result_path):
      if name.startswith("base") and base_seconds is None:
        with open(result_path) as f:
          base_seconds = json.load(f)["seconds"]
      continue
    left = args.budget_seconds - (time.time() - start)
    estimate = (base_seconds or 0.0) * cost
    if left < max(estimate, 60.0):
      log(f"{name}: {left:.0f} s left, about {estimate:.0f} s needed: not started")
      continue
    began = time.time()
    os.makedirs(out, exist_ok=True)
    train_dir = os.path.join(out, "train")
    log(f"{name}: training {hparams_set} (seed {seed}) for {args.steps} steps")
    with open(os.path.join(out, "train.log"), "w") as train_log:
      status = subprocess.run(
          ["t2t-trainer", "--backend=jax", f"--numpy_batches={args.prep}/batches",
           f"--hparams_set={hparams_set}", f"--hparams={hparams}",
           f"--output_dir={train_dir}", f"--train_steps={args.steps}",
           f"--train_seconds={int(max(left - EVAL_RESERVE_SECONDS, 30))}", "--eval_every=0",
           "--eval_steps=1",
           f"--save_checkpoints_steps={args.steps}", "--keep_checkpoint_max=1",
           "--average_last_n=0", f"--random_seed={seed}", "--log_every=500"],
          stdout=train_log, stderr=subprocess.STDOUT).returncode
    train_seconds = time.time() - began
    if status:
      log(f"{name}: t2t-trainer exited {status} (see {out}/train.log)")
      continue
    result = evaluate(train_dir, args.prep, out, args.dev_lines)
    result.update(name=name, row=row, hparams_set=hparams_set, seed=seed, seconds=time.time() - began,
                  train_wall_seconds=train_seconds, row_hparams=hparams,
                  target_steps=args.steps, stopped_by_time_bound=result["steps"] < args.steps)
    with files.atomic_write(result_path) as f:  # Its presence marks the run finished.
      json.dump(result, f, indent=1)
    if name.startswith("base"):
      base_seconds = base_seconds or result["seconds"]
    log(f"{name}: dev PPL {result['dev_ppl']:.3f}, {result['steps']} steps, "
        f"{result['seconds']:.0f} s (train {train_seconds:.0f}, decode {result['decode_seconds']:.0f})")


def row_hparams(args) -> str:
  """ROW_HPARAMS, then --extra_hparams (a variation of every row, run under --suffix)."""
  if args.extra_hparams and not args.suffix:
    raise SystemExit("table3_gpu.py: --extra_hparams needs a --suffix for its run names, so "
                     "that its runs never mix with the rows' own")
  return ROW_HPARAMS + ("," + args.extra_hparams if args.extra_hparams else "")


def run_in_parallel(args) -> None:
  """Each unfinished row in its own process, --parallel at a time, sharing the one GPU.

  A row's step at 4096 tokens leaves most of an H100 idle (launches, the host's
  dispatch), and its compilations (train, dev, search) run on one CPU core: rows
  side by side fill both. Their wall times then measure the group, not a row.
  """
  row_hparams(args)  # Checked before anything starts.
  pending = [row for row, _, _, _ in RUNS if row in args.rows.split(",")
             and not os.path.exists(os.path.join(args.out, row + args.suffix, "result.json"))]
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")  # Memory on demand, shared.
  start, running = time.time(), []
  while pending or running:
    while pending and len(running) < args.parallel:
      row = pending.pop(0)
      name = row + args.suffix
      os.makedirs(os.path.join(args.out, name), exist_ok=True)
      left = args.budget_seconds - (time.time() - start)
      command = [sys.executable, os.path.abspath(__file__), "run", f"--prep={args.prep}",
                 f"--out={args.out}", f"--steps={args.steps}", f"--budget_seconds={left:.0f}",
                 f"--rows={row}", f"--dev_lines={args.dev_lines}", "--parallel=1",
                 f"--extra_hparams={args.extra_hparams}", f"--suffix={args.suffix}"]
      with open(os.path.join(args.out, name, "run.log"), "w") as run_log:
        running.append((name, subprocess.Popen(command, stdout=run_log,
                                               stderr=subprocess.STDOUT, env=env)))
      log(f"{name}: started ({len(running)} running)")
    time.sleep(2)
    for name, proc in list(running):
      if proc.poll() is not None:
        running.remove((name, proc))
        log(f"{name}: exit {proc.returncode} after {time.time() - start:.0f} s")


def evaluate(train_dir: str, prep: str, out: str, dev_lines: int = 0) -> dict:
  """Dev PPL (all of val, teacher-forced) and the beam-4 decode of the last checkpoint."""
  import jax
  import keras
  from t2tlite.constants import EOS_ID
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.jax_search import JaxDecoder
  from t2tlite.training import checkpoint_manifest, losses, run_dir

  model, checkpoint = run_dir.load_model(train_dir, hparams_overrides="packed_batches=false")
  dev = os.path.join(prep, "dev_ids.npz")
  sources = numpy_batches.load_id_lists(dev, "inputs")
  targets = numpy_batches.load_id_lists(dev, "targets")
  if dev_lines:  # A smoke test's slice; the table uses all of dev.
    sources, targets = sources[:dev_lines], targets[:dev_lines]

  def with_eos(seqs):  # As the problem's examples: EOS-terminated, zero-padded to one width.
    return [list(s) + [EOS_ID] for s in seqs]

  src, tgt = with_eos(sources), with_eos(targets)
  width = max(max(map(len, src)), max(map(len, tgt)))
  trainable = [v.value for v in model.trainable_variables]
  non_trainable = [v.value for v in model.non_trainable_variables]

  @jax.jit  # The weights are arguments, not constants folded into the program.
  def nll_sums(trainable, non_trainable, batch):
    logits, _ = model.stateless_call(trainable, non_trainable, batch, training=False)
    sums = losses.token_loss_sums(logits, batch["targets"], model.hparams.label_smoothing)
    return sums.nll, sums.tokens

  nll = tokens = 0.0
  for first in range(0, len(src), DEV_ROWS):
    batch = {name: np.zeros([DEV_ROWS, width], np.int32) for name in ("inputs", "targets")}
    for row, i in enumerate(range(first, min(first + DEV_ROWS, len(src)))):
      batch["inputs"][row, :len(src[i])] = src[i]
      batch["targets"][row, :len(tgt[i])] = tgt[i]
    n, t = nll_sums(trainable, non_trainable, batch)
    nll, tokens = nll + float(n), tokens + float(t)
  began = time.time()
  hp = DecodeHParams().override(DECODE_HPARAMS).override(GPU_DECODE_BATCH)
  decoder = JaxDecoder(model, hp)
  hypotheses = decoder.decode_ids(sources)
  decode_seconds = time.time() - began
  numpy_batches.save_id_lists(os.path.join(out, "dev_hypotheses.npz"), ids=hypotheses)
  steps = checkpoint_manifest.step_of(checkpoint)
  hparams = model.hparams
  return {"steps": steps, "dev_ppl": float(np.exp(nll / tokens)), "dev_nll": nll,
          "dev_tokens": tokens, "dev_lines": len(sources), "decode_seconds": decode_seconds,
          "decode_compile_seconds": decoder.first_shape_seconds,
          "decode_hparams": DECODE_HPARAMS, "params": int(model.count_params()),
          "shape": {"N": hparams.num_encoder_layers, "d_model": hparams.d_model,
                    "d_ff": hparams.d_ff, "h": hparams.num_heads, "d_k": hparams.key_dim,
                    "d_v": hparams.value_dim, "P_drop": hparams.dropout,
                    "eps_ls": hparams.label_smoothing},
          "device": str(jax.devices()[0].device_kind), "keras": keras.__version__}


# --- report (TensorFlow) ---
def report(args) -> None:
  """Hypotheses to text, BLEU as the miniature sweep scores it (t2t-bleu), the page's section."""
  from t2tlite import registry
  problem = registry.problem(PROBLEM)
  target_encoder = problem.encoders(args.data_dir)["targets"]
  reference = os.path.join(args.data_dir, f"{PROBLEM}-dev.targets")
  with open(reference) as f:
    references = f.readlines()
  rows = []
  order = {row: i for i, (row, _, _, _) in enumerate(RUNS)}
  results = []
  for name in sorted(os.listdir(args.results)):
    path = os.path.join(args.results, name, "result.json")
    if os.path.exists(path):
      with open(path) as f:
        results.append(json.load(f))
  # The rows' own settings first, in RUNS' order; variations (--extra_hparams) after.
  results.sort(key=lambda r: (r["row_hparams"] != ROW_HPARAMS, r["row_hparams"],
                              order.get(r.get("row", r["name"]), len(order))))
  for result in results:
    name = result["name"]
    out = os.path.join(args.results, name)
    hypotheses = numpy_batches.load_id_lists(os.path.join(out, "dev_hypotheses.npz"), "ids")
    decodes = os.path.join(out, "dev.de")
    with open(decodes, "w") as f:
      f.writelines(target_encoder.decode(ids) + "\n" for ids in hypotheses)
    row_reference = reference
    if len(hypotheses) < len(references):  # A smoke test's slice of dev.
      row_reference = os.path.join(out, "dev.reference.de")
      with open(row_reference, "w") as f:
        f.writelines(references[:len(hypotheses)])
    subprocess.run(["t2t-bleu", f"--translation={decodes}", f"--reference={row_reference}",
                    "--language=de", "--lowercased_bleu", "--overwrite",
                    f"--output_json={os.path.join(out, 'dev.bleu.json')}"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "dev.bleu.json")) as f:
      result["bleu"] = json.load(f)["bleu"]["score"]
    rows.append(result)
    log(f"{name}: d_model {result['shape']['d_model']}, h {result['shape']['h']}, "
        f"{result['params'] / 1e6:.1f}M params, {result['steps']} steps: dev PPL "
        f"{result['dev_ppl']:.3f}, BLEU {result['bleu']:.2f}")
  with open(os.path.join(args.results, "table3_gpu.json"), "w") as f:
    json.dump(rows, f, indent=1)
  if args.page:
    notes = table3_report().read_notes(os.path.join(os.path.dirname(args.page) or ".",
                                                    "table3_notes.md"))
    write_section(args.page, section(rows, notes))
    log(f"wrote the real-shape section of {args.page}")


def table3_report():
  """recipes/table3_report.py (beside this script): the miniature page's layout and verdicts.

  Imported where the page is written only: the GPU machine's `run` needs none of it.
  """
  here = os.path.dirname(os.path.abspath(__file__))
  if here not in sys.path:
    sys.path.insert(0, here)
  import table3_report as report
  return report


def section(all_rows, notes=None) -> str:
  """The page's second table: Table 3's layout, the paper's figures beside, the claims judged.

  Runs with other settings (--extra_hparams) follow in a table of their own, each beside the
  base run of the same settings. `notes`: "real_shapes.<claim id or 'variations'>" -> why.
  """
  import statistics
  from t2tlite import registry
  from t2tlite.hparams.table3 import TABLE3
  report = table3_report()
  notes = notes or {}
  rows = [r for r in all_rows if r["row_hparams"] == ROW_HPARAMS]
  by_paper = {r.paper_set: r for r in TABLE3}
  runs = {}
  for r in rows:
    runs.setdefault(by_paper[r["hparams_set"]].mini_set, []).append(r)
  base_set = by_paper["transformer_base"].mini_set
  std = report.spread(runs.get(base_set, []))
  noise = {m: (None if v is None else report.NOISE_SEEDS * v) for m, v in std.items()}
  figures = {s: report.ours(r) for s, r in runs.items()}
  # Cells equal to the base's are left blank, as in the paper: the base run's shape, or the
  # registered base's where the base did not run.
  base_shape = (runs[base_set][0]["shape"] if base_set in runs
                else report.shape(registry.HPARAMS.get("transformer_base")()))
  out = [report.KEPT_SECTION[0], "",
         "## Real shapes on one GPU: base, (A) h=1 and h=16, (C) d_model=1024", ""]
  devices = sorted({r["device"] for r in rows})
  steps = sorted({r["steps"] for r in rows})
  out += [f"The paper's own shapes (`transformer_base`, `transformer_base_h1`, "
          f"`transformer_base_h16`, `transformer_base_d1024`) on the same Multi30k en-de data, "
          f"vocabulary and dev measures as the table above, trained on {', '.join(devices)} "
          f"under JAX for {'/'.join(map(str, steps))} steps of 4096-token batches each "
          f"(`{ROW_HPARAMS}`; recipes/table3_gpu.py says why each departs from the paper), "
          "the runs side by side on the one device (all at once, so a row's wall time is "
          "its share of that). Dev decoded there with the same beam search "
          f"({DECODE_HPARAMS}) under JAX; BLEU scored here as above. The base row is the mean "
          "± sample standard deviation over its seeds.", "",
          "```bash",
          "python recipes/table3_gpu.py prepare --data_dir=DATA --tmp_dir=RAW --out=PREP   # here",
          "python recipes/table3_gpu.py run --prep=PREP --out=RUNS --parallel=6          # on the GPU",
          "python recipes/table3_gpu.py report --prep=PREP --results=RUNS --data_dir=DATA "
          "--page=docs/table3.md",
          "```", ""]
  layout = report.LAYOUT + ("paper PPL", "paper BLEU", "paper params x10^6", "row's wall time")
  out += ["| | " + " | ".join(layout) + " |", "|---" * (len(layout) + 1) + "|"]
  previous = None
  for row in TABLE3:
    if row.mini_set not in runs:
      continue
    row_runs = runs[row.mini_set]
    mine = row_runs[0]["shape"]
    is_base = row.row == "base"
    cells = [("" if not is_base and mine[c] == base_shape[c] else str(mine[c]))
             for c in report.SHAPE_COLUMNS]
    label = "" if row.row == previous else (row.row if is_base else f"({row.row})")
    previous = row.row
    fig = figures[row.mini_set]
    ppl, bleu = f"{fig['ppl']:.2f}", f"{fig['bleu']:.1f}"
    if is_base and len(row_runs) > 1:
      ppl += f" ±{std['ppl']:.2f}"
      bleu += f" ±{std['bleu']:.1f}"
    trained = sorted({r["steps"] for r in row_runs})
    step_cell = "/".join(map(str, trained)) + (
        " (time bound)" if any(r.get("stopped_by_time_bound") for r in row_runs) else "")
    minutes = statistics.fmean(r["seconds"] for r in row_runs) / 60
    cells += [step_cell, ppl, bleu, f"{row_runs[0]['params'] / 1e6:.1f}", f"{row.ppl:.2f}",
              f"{row.bleu:.1f}", str(row.params_m or ""), f"{minutes:.1f} min"]
    out.append(f"| {label} | " + " | ".join(cells) + " |")
  out += ["", "Seeds of the base row: " + ", ".join(
      f"{r['seed']}: PPL {r['dev_ppl']:.3f}, BLEU {r['bleu']:.2f}"
      for r in runs.get(base_set, [])) + (
      f"; a delta is within seed noise below PPL {noise['ppl']:.3f}, BLEU {noise['bleu']:.2f}."
      if noise["ppl"] is not None else "; one seed: no spread, so no verdicts."), ""]
  paper = report.paper_figures()
  out += ["| claim | row vs reference | paper ΔPPL | paper ΔBLEU | ours ΔPPL | ours ΔBLEU | "
          "PPL verdict | BLEU verdict |", "|---" * 8 + "|"]
  short = lambda mini_set: mini_set[len("transformer_table3_"):]  # noqa: E731
  judged = []
  for claim in report.CLAIMS:
    for c in claim.comparisons:
      present = tuple(r for r in c.reference if r in runs)
      if c.row not in runs or not present:
        continue
      # The paper's delta over the same references as ours: only the rows run here.
      c = report.Comparison(c.row, present, c.expected)
      cells = [claim.text, f"{short(c.row)} vs {'best of ' if len(present) > 1 else ''}"
               + "/".join(map(short, present))]
      cells += [report.signed(report.delta(paper, c, "ppl"), 2),
                report.signed(report.delta(paper, c, "bleu"), 1)]
      ours = {m: report.delta(figures, c, m) for m in report.METRICS}
      cells += [report.signed(ours["ppl"], 2), report.signed(ours["bleu"], 2)]
      cells += [report.verdict(ours[m], noise[m], c.expected[m], lower)
                for m, lower in report.METRICS.items()]
      out.append("| " + " | ".join(cells) + " |")
      judged.append(claim.id)
  out += ["", "Rows are named as the miniature sets they stand for (the paper's row); the "
          "comparisons (the paper's deltas too) use only the rows run here, so \"best of\" covers "
          "fewer settings than the paper's Table 3."]
  why = [f"- **{claim}**: {notes['real_shapes.' + claim]}" for claim in dict.fromkeys(judged)
         if "real_shapes." + claim in notes]
  if why:
    out += ["", "On the verdicts:", ""] + why
  out += variations_table([r for r in all_rows if r["row_hparams"] != ROW_HPARAMS], notes)
  out += ["", report.KEPT_SECTION[1]]
  return "\n".join(out)


def variations_table(rows, notes) -> list:
  """Markdown lines: runs with other settings, each with its delta to that setting's base run."""
  if not rows:
    return []
  out = ["", "### Other settings", "",
         "| run | settings beyond the rows' | steps | PPL (dev) | BLEU (dev) | params x10^6 | "
         "ΔPPL vs base, same settings | ΔBLEU vs base, same settings |", "|---" * 8 + "|"]
  base = {r["row_hparams"]: r for r in rows if r["hparams_set"] == "transformer_base"}
  for r in rows:
    extra = r["row_hparams"][len(ROW_HPARAMS) + 1:]
    ref = base.get(r["row_hparams"])
    deltas = ["", ""]
    if ref is not None and ref is not r:
      deltas = [f"{r['dev_ppl'] - ref['dev_ppl']:+.2f}", f"{r['bleu'] - ref['bleu']:+.2f}"]
    out.append(f"| {r['name']} (`{r['hparams_set']}`) | `{extra}` | {r['steps']} | "
               f"{r['dev_ppl']:.2f} | {r['bleu']:.1f} | {r['params'] / 1e6:.1f} | "
               + " | ".join(deltas) + " |")
  if "real_shapes.variations" in notes:
    out += ["", notes["real_shapes.variations"]]
  return out


def write_section(page: str, text: str) -> None:
  """Puts `text` in place of the page's real-shape section (table3_report.KEPT_SECTION)."""
  report = table3_report()
  with open(page, encoding="utf-8") as f:
    current = f.read()
  with files.atomic_write(page) as f:
    f.write(report.replace_section(current, text))


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest="command", required=True)
  p = commands.add_parser("prepare")
  p.add_argument("--data_dir", required=True)
  p.add_argument("--tmp_dir", default="", help="raw Multi30k (default: --data_dir)")
  p.add_argument("--out", required=True)
  p.add_argument("--steps", type=int, default=3000)
  r = commands.add_parser("run")
  r.add_argument("--prep", required=True)
  r.add_argument("--out", required=True)
  r.add_argument("--steps", type=int, default=3000)
  r.add_argument("--budget_seconds", type=float, default=500)
  r.add_argument("--rows", default=",".join(name for name, _, _, _ in RUNS),
                 help="run names to train, comma-separated (default: all, in RUNS' order)")
  r.add_argument("--dev_lines", type=int, default=0, help="smoke tests: the first N dev lines")
  r.add_argument("--parallel", type=int, default=1, help="rows trained at once on the one device")
  r.add_argument("--extra_hparams", default="", help="a variation of every row: more --hparams "
                 "after ROW_HPARAMS (e.g. learning_rate_warmup_steps=4000); needs --suffix")
  r.add_argument("--suffix", default="", help="appended to the run names (e.g. .w4000)")
  s = commands.add_parser("report")
  s.add_argument("--prep", required=True)
  s.add_argument("--results", required=True)
  s.add_argument("--data_dir", required=True)
  s.add_argument("--page", default="", help="also write the table into this page (docs/table3.md)")
  args = parser.parse_args(argv)
  {"prepare": prepare, "run": run, "report": report}[args.command](args)


if __name__ == "__main__":
  main()
