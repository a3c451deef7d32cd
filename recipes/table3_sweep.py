r"""The Table 3 sweep: every miniature row trained, evaluated on all of dev, two runs at a time.

  python recipes/table3_sweep.py --run_dir=runs/table3 --steps=1000 --cores=0,1
  python recipes/table3_sweep.py --run_dir=runs/table3 --status

recipes/table3.sh runs datagen, then this, then recipes/table3_report.py. The
rows are hparams/table3.py's miniatures (`TABLE3`); the base row is trained
with --base_seeds seeds (default 3, for the seed spread), every other row with
seed 1. Each run, pinned to one core with one intra-op thread:

  1. t2t-trainer for --steps x the row's step ratio (1 for every row but big),
     --train_seconds as a safety bound only, then one teacher-forced pass over
     all of dev (its perplexity per subword token is exp(NLL), not the
     label-smoothed loss);
  2. t2t-decoder on all of dev (val, 1014 lines) with the last checkpoint (no
     averaging): beam 4, alpha 0.6, max length input + 50, as in Table 3;
  3. t2t-bleu of those decodes against dev's references;
  4. `--collect`: one JSON of results, RUN_DIR/results/NAME.json.

Test is never decoded. Runs start longest first (estimated cost x steps), one
per core, so the two cores finish close together.

Resuming: a run is finished when its results file exists. Rerunning the same
command starts only the others; an interrupted run resumes from its last
checkpoint (the trainer's own resume) and redoes its decode. The sweep's
settings are kept in RUN_DIR/sweep.json, and a rerun with other --steps,
--hparams or decode settings is refused: rows are compared at equal steps.

Progress: a line on stderr every --progress_seconds and at every start and
finish (done, running with each trainer's step and ETA, queued, the sweep's
ETA), the same in RUN_DIR/progress.txt; --status prints it for a sweep that
runs elsewhere. Logs of each stage in RUN_DIR/rows/NAME/, the sweep's in
RUN_DIR/sweep.log. Killing the driver (Ctrl-C, kill; even kill -9) stops its runs too; stopped,
it exits with status 130, and recipes/table3.sh then writes no page.
"""

import argparse
import dataclasses
import datetime
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List

from t2tlite import cli, errors, files, registry
from t2tlite.hparams.table3 import BY_MINI_SET, TABLE3, steps_ratio
from t2tlite.progress import format_duration

PROBLEM = "multi30k_ende"
DECODE_HPARAMS = "beam_size=4,alpha=0.6,extra_length=50"  # Section 6: beam 4, alpha 0.6, +50.
DEFAULT_ROWS = tuple(r.mini_set for r in TABLE3 if r.row != "big")  # big: 3x steps at 3x cost.
# docs/results.md: transformer_multi30k trained 5662 steps in 45:00 on one core (2.10 steps/s);
# the first ETA scales that by `relative_cost` (the miniature base: 1.70 steps/s).
MEASURED = ("transformer_multi30k", 5662 / 2700)
PRIOR_OVERHEAD_SECONDS = 90.0  # Per run: imports, traces, the dev pass, 1014-line decode, BLEU.
MEAN_LENGTH = 17  # Subword tokens (EOS included) of a Multi30k sentence, for attention's cost.


def set_hparams(name: str):
  """A registered set by name, without loading the models (TensorFlow) as registry.hparams does."""
  return registry.HPARAMS.get(name)()


STOPPED = 130  # Exit status of a sweep stopped by a signal (the shell's for Ctrl-C).


class SweepError(errors.UserError):
  """A setting or a run directory at fault; one line, exit 2."""


@dataclasses.dataclass
class Run:
  """One training run of the sweep."""
  name: str  # "base.seed2", "h1": the miniature's name without its prefix (+ seed for base).
  mini_set: str  # Registered hparams set.
  seed: int
  steps: int
  cost: float  # Estimated seconds per step relative to the miniature base.


def relative_cost(hp, vocab_size: int = 8000) -> float:
  """Multiply-adds per (source, target) token pair relative to the miniature base's.

  Projections and FFNs per layer, attention scores at MEAN_LENGTH, the
  pre-softmax projection; what the CPU time of a step follows at these sizes
  (d_model doubled: 2.5x). Used for the order of runs and the first ETA only.
  """
  def macs(h):
    qkvo = 2 * h.d_model * h.num_heads * (h.key_dim + h.value_dim)
    scores = MEAN_LENGTH * h.num_heads * (h.key_dim + h.value_dim)
    ffn = 2 * h.d_model * h.d_ff
    encoder = qkvo + scores + ffn
    decoder = 2 * (qkvo + scores) + ffn
    return (h.num_encoder_layers * encoder + h.num_decoder_layers * decoder +
            h.d_model * vocab_size)
  return macs(hp) / macs(set_hparams("transformer_table3_base"))


def prior_seconds_per_cost_step() -> float:
  """Seconds per step of the miniature base before any run has finished: from MEASURED."""
  name, steps_per_second = MEASURED
  return relative_cost(set_hparams(name)) / steps_per_second


def plan(rows, base_seeds: int, steps: int) -> List[Run]:
  """The runs of `rows` (miniature set names), longest first."""
  runs = []
  for mini_set in rows:
    row = BY_MINI_SET[mini_set]
    short = mini_set[len("transformer_table3_"):]
    seeds = range(1, base_seeds + 1) if row.row == "base" else (1,)
    for seed in seeds:
      name = f"{short}.seed{seed}" if row.row == "base" else short
      runs.append(Run(name, mini_set, seed, int(round(steps * steps_ratio(row))),
                      relative_cost(set_hparams(mini_set))))
  return sorted(runs, key=lambda r: -r.cost * r.steps)


def unfinished(runs: List[Run], run_dir: str) -> List[Run]:
  """Runs without a results file, in plan order."""
  return [r for r in runs if not os.path.exists(result_path(run_dir, r.name))]


def result_path(run_dir: str, name: str) -> str:
  return os.path.join(run_dir, "results", f"{name}.json")


def row_dir(run_dir: str, name: str) -> str:
  return os.path.join(run_dir, "rows", name)


# --- Settings kept across reruns ---
COMPARED = ("steps", "hparams", "decode_hparams", "problem", "data_dir")


def check_settings(run_dir: str, settings: dict) -> dict:
  """Writes RUN_DIR/sweep.json the first time; later, refuses settings that would unequal rows."""
  path = os.path.join(run_dir, "sweep.json")
  if os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    for key in COMPARED:
      if saved["settings"].get(key) != settings.get(key):
        raise SweepError(f"{path} was started with {key}={saved['settings'].get(key)!r}, not "
                         f"{settings.get(key)!r}: rows are compared at equal settings; use "
                         "another run directory")
    saved["settings"]["rows"] = sorted(set(saved["settings"]["rows"]) | set(settings["rows"]))
    return saved
  return {"settings": settings, "sessions": []}


def write_json(path: str, value) -> None:
  with files.atomic_write(path) as f:
    json.dump(value, f, indent=1, sort_keys=True)
    f.write("\n")


# --- Running the stages of one run ---
def pinned(core: str, argv: List[str]) -> List[str]:
  """argv on `core` with one intra-op and one inter-op thread.

  Under `setpriv --pdeathsig TERM` where util-linux has it: the run gets SIGTERM
  when the driver dies (even by kill -9), so no trainer outlives it holding its
  run directory.
  """
  guard = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []
  return guard + ["taskset", "-c", core, "env", "TF_NUM_INTRAOP_THREADS=1",
          "TF_NUM_INTEROP_THREADS=1", "TF_CPP_MIN_LOG_LEVEL=1"] + argv


def command(name: str) -> str:
  """The t2t-* command installed beside this interpreter, else the one on PATH."""
  beside = os.path.join(os.path.dirname(sys.executable), name)
  return beside if os.access(beside, os.X_OK) else name


def stage_commands(run: Run, args) -> Dict[str, List[str]]:
  """The argv of each stage of `run`, in order (train, decode, bleu, collect)."""
  out = row_dir(args.run_dir, run.name)
  train = os.path.join(out, "train")
  decodes = os.path.join(out, "dev.de")
  return {
      "train": [command("t2t-trainer"), f"--problem={PROBLEM}",
                f"--hparams_set={run.mini_set}", f"--hparams={args.hparams}",
                f"--data_dir={args.data_dir}", f"--output_dir={train}",
                f"--train_steps={run.steps}",
                f"--train_seconds={int(args.max_row_minutes * 60 * max(run.cost, 1.0))}",
                "--eval_every=0", "--eval_steps=0", "--noeval_decode", "--noattention_summaries",
                f"--save_checkpoints_steps={args.save_steps}", "--keep_checkpoint_max=2",
                f"--random_seed={run.seed}", f"--log_every={args.log_every}"],
      "decode": [command("t2t-decoder"), f"--problem={PROBLEM}", f"--data_dir={args.data_dir}",
                 f"--output_dir={train}", "--decode_split=dev", f"--decode_to_file={decodes}",
                 "--overwrite", f"--decode_hparams={args.decode_hparams}"],
      "bleu": [command("t2t-bleu"), f"--translation={decodes}",
               f"--reference={os.path.join(args.data_dir, PROBLEM + '-dev.targets')}",
               "--language=de", "--lowercased_bleu", "--overwrite",
               f"--output_json={os.path.join(out, 'dev.bleu.json')}"],
      "collect": [sys.executable, os.path.abspath(__file__), "--collect",
                  f"--run_dir={args.run_dir}", f"--name={run.name}",
                  f"--mini_set={run.mini_set}", f"--seed={run.seed}",
                  f"--target_steps={run.steps}", f"--decode_hparams={args.decode_hparams}"],
  }


class Sweep:
  """Runs the planned runs on the cores, one per core, and reports progress."""

  def __init__(self, runs: List[Run], args, log):
    self.args = args
    self.log = log
    self.queue = list(runs)
    self.total = len(runs)
    self.done: List[str] = []
    self.failed: List[str] = []
    self.running: Dict[str, tuple] = {}  # name -> (run, core, started, stage)
    self.children: Dict[str, subprocess.Popen] = {}
    self.lock = threading.Lock()
    self.report_lock = threading.Lock()  # One writer of progress.txt at a time.
    self.stopping = False
    self.seconds_per_cost_step: List[float] = []  # Observed, from finished runs.
    self.overheads: List[float] = []
    self.evaluating_since: Dict[str, float] = {}  # name -> when its first stage after train began.

  def run(self) -> int:
    workers = [threading.Thread(target=self._worker, args=(core,), daemon=True)
               for core in self.args.cores.split(",")]
    for w in workers:
      w.start()
    last = time.time()
    while any(w.is_alive() for w in workers):
      time.sleep(1.0)
      if time.time() - last >= self.args.progress_seconds:
        self.report()
        last = time.time()
    self.report()
    return STOPPED if self.stopping else 1 if self.failed else 0

  def stop(self) -> None:
    """Stops the runs in flight (their checkpoints stay; a rerun resumes them)."""
    with self.lock:
      self.stopping = True
      self.queue.clear()
      children = list(self.children.values())
    for child in children:
      if child.poll() is None:
        child.terminate()

  def _worker(self, core: str) -> None:
    while True:
      with self.lock:
        if not self.queue or self.stopping:
          return
        run = self.queue.pop(0)
        self.running[run.name] = (run, core, time.time(), "train")
      self.log(f"start {run.name} ({run.mini_set}, seed {run.seed}, {run.steps} steps) "
               f"on core {core}")
      self.report()
      ok, timings = self._run_stages(run, core)
      with self.lock:
        del self.running[run.name]
        self.evaluating_since.pop(run.name, None)
        stopped = self.stopping and not ok
        if ok:
          self.done.append(run.name)
        elif not stopped:
          self.failed.append(run.name)
      if ok:
        self._finished(run, timings)
      elif stopped:
        self.log(f"stopped {run.name}: a rerun resumes it from its last checkpoint")
      else:
        self.log(f"FAILED {run.name}: see {row_dir(self.args.run_dir, run.name)}/*.log; "
                 "a rerun retries it")
      self.report()

  def _run_stages(self, run: Run, core: str):
    out = row_dir(self.args.run_dir, run.name)
    os.makedirs(out, exist_ok=True)
    timings_path = os.path.join(out, "timings.json")
    timings = json.load(open(timings_path)) if os.path.exists(timings_path) else {}
    for stage, argv in stage_commands(run, self.args).items():
      with self.lock:
        if self.stopping:
          return False, timings
        self.running[run.name] = self.running[run.name][:3] + (stage,)
        if stage != "train":
          self.evaluating_since.setdefault(run.name, time.time())
      started = time.time()
      with open(os.path.join(out, f"{stage}.log"), "a") as log:
        log.write(f"\n# {datetime.datetime.now():%Y-%m-%d %H:%M:%S} core {core}: "
                  f"{' '.join(argv)}\n")
        log.flush()
        child = subprocess.Popen(pinned(core, argv), stdout=log, stderr=subprocess.STDOUT)
        with self.lock:
          self.children[run.name] = child
          if self.stopping:  # stop() ran between the check above and this start.
            child.terminate()
        code = child.wait()
        with self.lock:
          self.children.pop(run.name, None)
        log.write(f"# exit status {code}" + (f" (signal {-code})" if code < 0 else "") + "\n")
      timings[stage] = timings.get(stage, 0.0) + time.time() - started
      write_json(timings_path, timings)
      if code != 0:
        self.log(f"{run.name}: {stage} exited with status {code}")
        return False, timings
    return True, timings

  def _finished(self, run: Run, timings: dict) -> None:
    result = json.load(open(result_path(self.args.run_dir, run.name)))
    train_seconds = result.get("train_seconds") or timings.get("train", 0.0)
    with self.lock:
      self.seconds_per_cost_step.append(train_seconds / max(run.steps * run.cost, 1e-9))
      self.overheads.append(sum(timings.values()) - train_seconds)
    self.log(f"done {run.name}: dev ppl {result['dev_ppl']:.3f}, BLEU {result['bleu']:.2f}, "
             f"{result['steps']} steps, train {format_duration(train_seconds)}, row "
             f"{format_duration(sum(timings.values()))}")

  # --- Progress ---
  def report(self) -> None:
    with self.report_lock:
      text = self.status_line()
      print(text, file=sys.stderr, flush=True)
      with files.atomic_write(os.path.join(self.args.run_dir, "progress.txt")) as f:
        f.write(text + "\n")

  def status_line(self) -> str:
    with self.lock:
      running = dict(self.running)
      queued = list(self.queue)
      done, failed = list(self.done), list(self.failed)
      per_cost_step = (sorted(self.seconds_per_cost_step)[len(self.seconds_per_cost_step) // 2]
                       if self.seconds_per_cost_step else prior_seconds_per_cost_step())
      overhead = (sum(self.overheads) / len(self.overheads) if self.overheads
                  else PRIOR_OVERHEAD_SECONDS)
    parts, left = [], []
    for name, (run, core, started, stage) in sorted(running.items()):
      step, eta = trainer_progress(os.path.join(row_dir(self.args.run_dir, name), "train.log"))
      estimate = run.steps * run.cost * per_cost_step + overhead
      if stage == "train" and step is not None:
        remaining = (eta if eta is not None else estimate) + overhead
        parts.append(f"{name}@{core} step {step}/{run.steps}")
      elif stage == "train":
        remaining = max(estimate - (time.time() - started), overhead)
        parts.append(f"{name}@{core} train")
      else:  # Decoding, scoring, collecting: what is left of the overhead.
        since = self.evaluating_since.get(name, time.time())
        remaining = max(overhead / 2 - (time.time() - since), 5.0)
        parts.append(f"{name}@{core} {stage}")
      left.append(remaining)
    queued_seconds = sum(r.steps * r.cost * per_cost_step + overhead for r in queued)
    cores = max(len(self.args.cores.split(",")), 1)
    eta = (sum(left) + queued_seconds) / cores if left or queued else 0.0
    eta = max(eta, max(left, default=0.0))
    now = datetime.datetime.now().strftime("%H:%M:%S")
    return (f"[{now}] table3: done {len(done) + self.already_done}/{self.total + self.already_done}"
            + (f", FAILED {','.join(failed)}" if failed else "")
            + f" | running {'; '.join(parts) or '-'} | queued {len(queued)}"
            + (f" | sweep ETA {format_duration(eta)}" if left or queued else ""))

  already_done = 0  # Runs finished by an earlier invocation (set by main).


_STEP = re.compile(r"step (\d+)/(\d+) \|.*\| ETA (?:(\d+)h)?(\d+)m(?:(\d+)s)?")


def trainer_progress(log_path: str):
  """(step, seconds left) from the last progress line of a trainer log, or (None, None)."""
  try:
    with open(log_path, "rb") as f:
      f.seek(max(os.path.getsize(log_path) - 20000, 0))
      tail = f.read().decode("utf-8", "replace")
  except OSError:
    return None, None
  matches = list(_STEP.finditer(tail))
  if not matches:
    return None, None
  m = matches[-1]
  hours, minutes, seconds = (int(g or 0) for g in m.group(3, 4, 5))
  return int(m.group(1)), hours * 3600 + minutes * 60 + seconds


# --- --collect: one run's results, read back from what its stages wrote ---
def collect(args) -> None:
  """Writes RUN_DIR/results/NAME.json from the run's checkpoint, eval events and BLEU json."""
  import tensorflow as tf
  from t2tlite.training import curves, run_dir as run_dir_lib

  out = row_dir(args.run_dir, args.name)
  train = os.path.join(out, "train")
  checkpoint = tf.train.latest_checkpoint(train)
  if checkpoint is None:
    raise SweepError(f"{train}: no checkpoint")
  steps = int(checkpoint.rsplit("-", 1)[1])
  dev = curves.read_scalars(os.path.join(train, "eval"))
  last_eval = dev.get("perplexity", [(None, None)])[-1][0]
  if last_eval != steps:
    raise SweepError(f"{train}/eval: last dev evaluation at step {last_eval}, not at the "
                     f"last checkpoint's step {steps}")
  at_end = {tag: dict(curve)[steps] for tag, curve in dev.items() if steps in dict(curve)}
  hp = run_dir_lib.load_hparams(train)
  model = registry.model(run_dir_lib.load_run_info(train).get("model", "transformer"))(hp)
  with open(os.path.join(out, "dev.bleu.json")) as f:
    scores = json.load(f)
  row = BY_MINI_SET[args.mini_set]
  result = {
      "name": args.name, "mini_set": args.mini_set, "paper_set": row.paper_set, "row": row.row,
      "seed": args.seed, "steps": steps, "target_steps": args.target_steps,
      "stopped_by_time_bound": steps < args.target_steps,
      "train_seconds": float(tf.train.load_variable(
          checkpoint, "seconds_trained/.ATTRIBUTES/VARIABLE_VALUE")),
      "dev_ppl": at_end["perplexity"], "dev_nll": at_end["nll"], "dev_loss": at_end["loss"],
      "dev_lines": scores["lines"],
      "bleu": scores["bleu"]["score"], "bleu_signature": scores["bleu"]["signature"],
      "tokenized_bleu": scores["tokenized_bleu"]["score"],
      "lowercased_tokenized_bleu": scores["lowercased_tokenized_bleu"]["score"],
      "chrf": scores["chrf"]["score"],
      "decode_hparams": args.decode_hparams, "params": int(model.count_params()),
      "shape": {"N": hp.num_encoder_layers, "d_model": hp.d_model, "d_ff": hp.d_ff,
                "h": hp.num_heads, "d_k": hp.key_dim, "d_v": hp.value_dim,
                "P_drop": hp.dropout, "eps_ls": hp.label_smoothing,
                "position_encoding": hp.position_encoding},
      "vocab_size": hp.target_vocab_size, "checkpoint": os.path.basename(checkpoint),
      "finished": time.time(), "stage_seconds": _read_timings(out),
  }
  write_json(result_path(args.run_dir, args.name), result)


def _read_timings(out: str) -> dict:
  """Seconds of each stage so far (train, decode, bleu), over every invocation of the row."""
  path = os.path.join(out, "timings.json")
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


# --- The command ---
def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--run_dir", default="runs/table3")
  parser.add_argument("--data_dir", help="t2t-datagen's output for multi30k_ende "
                      "(default RUN_DIR/data)")
  parser.add_argument("--steps", type=int, default=1000,
                      help="Train steps of every row (big: 3x, as the paper's 300K to 100K).")
  parser.add_argument("--rows", default=",".join(DEFAULT_ROWS),
                      help="Miniature sets to train (default: every Table 3 row but big).")
  parser.add_argument("--base_seeds", type=int, default=3)
  parser.add_argument("--cores", default="0,1", help="One run at a time on each of these cores.")
  parser.add_argument("--hparams", default="xla=false",
                      help="Appended to every row's set (as docs/results.md's runs).")
  parser.add_argument("--decode_hparams", default=DECODE_HPARAMS)
  parser.add_argument("--max_row_minutes", type=float, default=45.0,
                      help="--train_seconds of a run: this x the row's estimated cost (at least "
                      "1x); a safety bound, not how rows are compared.")
  parser.add_argument("--save_steps", type=int, default=250)
  parser.add_argument("--log_every", type=int, default=50)
  parser.add_argument("--progress_seconds", type=float, default=60.0)
  parser.add_argument("--status", action="store_true", help="Print the progress of the sweep "
                      "in --run_dir and exit.")
  parser.add_argument("--collect", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--name", help=argparse.SUPPRESS)
  parser.add_argument("--mini_set", help=argparse.SUPPRESS)
  parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
  parser.add_argument("--target_steps", type=int, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.data_dir = args.data_dir or os.path.join(args.run_dir, "data")
  return args


def check_args(args) -> List[str]:
  rows = [r.strip() for r in args.rows.split(",") if r.strip()]
  unknown = [r for r in rows if r not in BY_MINI_SET]
  if unknown:
    raise SweepError(f"--rows: unknown {', '.join(unknown)}; one of "
                     f"{', '.join(BY_MINI_SET)}")
  for name in ("steps", "base_seeds", "save_steps", "log_every"):
    if getattr(args, name) < 1:
      raise SweepError(f"--{name}={getattr(args, name)}: must be >= 1")
  if not re.fullmatch(r"\d+(,\d+)*", args.cores):
    raise SweepError(f"--cores={args.cores}: a comma list of core numbers, e.g. 0,1")
  if not os.path.exists(os.path.join(args.data_dir, f"{PROBLEM}-dev.targets")):
    raise SweepError(f"--data_dir={args.data_dir}: no {PROBLEM} data; run t2t-datagen "
                     f"--problem={PROBLEM} --data_dir={args.data_dir} first")
  return rows


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.collect:
    collect(args)
    return 0
  if args.status:
    path = os.path.join(args.run_dir, "progress.txt")
    if not os.path.exists(path):
      raise SweepError(f"--run_dir={args.run_dir}: no sweep has reported progress there")
    print(open(path).read().rstrip())
    return 0
  rows = check_args(args)
  os.makedirs(args.run_dir, exist_ok=True)
  lock = open(os.path.join(args.run_dir, "sweep.lock"), "w")
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    raise SweepError(f"--run_dir={args.run_dir}: another sweep is running there") from None
  settings = {"steps": args.steps, "hparams": args.hparams,
              "decode_hparams": args.decode_hparams, "problem": PROBLEM,
              "data_dir": os.path.abspath(args.data_dir), "rows": rows,
              "base_seeds": args.base_seeds, "cores": args.cores}
  record = check_settings(args.run_dir, settings)
  runs = plan(rows, args.base_seeds, args.steps)
  todo = unfinished(runs, args.run_dir)
  session = {"start": time.time(), "argv": sys.argv[1:], "runs": [r.name for r in todo]}
  record["sessions"].append(session)
  sweep_json = os.path.join(args.run_dir, "sweep.json")
  write_json(sweep_json, record)

  log_file = open(os.path.join(args.run_dir, "sweep.log"), "a")

  def log(message):
    line = f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S}] {message}"
    print(line, file=sys.stderr, flush=True)
    log_file.write(line + "\n")
    log_file.flush()

  sweep = Sweep(todo, args, log)
  sweep.already_done = len(runs) - len(todo)
  log(f"sweep in {args.run_dir}: {len(runs)} runs, {sweep.already_done} already finished; "
      f"{len(todo)} to run on cores {args.cores}, {args.steps} steps each")

  def on_signal(signum, frame):
    log(f"signal {signum}: stopping the runs in flight (a rerun resumes them)")
    sweep.stop()

  signal.signal(signal.SIGTERM, on_signal)
  signal.signal(signal.SIGINT, on_signal)
  code = sweep.run()
  session["end"] = time.time()
  write_json(sweep_json, record)
  left = unfinished(runs, args.run_dir)
  log(f"sweep {'stopped' if sweep.stopping else 'ended'}: {len(runs) - len(left)}/{len(runs)} "
      f"runs finished" + (f"; unfinished: {', '.join(r.name for r in left)}" if left else ""))
  return code


def run() -> None:
  cli.run_script(main)


if __name__ == "__main__":
  run()
