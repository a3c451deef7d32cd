"""The exported model (t2t-exporter) against in-process t2t-decoder decoding, in one run.

Why
---
A text-to-text SavedModel puts tokenization, the compiled beam search and
detokenization in one graph (t2tlite/decoding/export.py). This says what that
costs or saves next to decoding in-process (`DecodePipeline`, what t2t-decoder
runs), on the same checkpoint, decode hparams and lines, and what a served
model answers a single sentence in.

What is measured
----------------
1. Export: wall time of the `t2t-exporter` command (TensorFlow start, model
   load, tracing, saving) and of the save alone (the export's own record), and
   the size of the version directory (variables, saved_model.pb, assets).
2. Throughput on the first --lines lines of the problem's test split
   (Multi30k test_2016: 1000), each side warm (one untimed pass over the same
   lines first, so every batch shape is traced and compiled), then --reps timed
   passes, median:
     * in-process: `DecodePipeline.decode(lines)`, its own batching (sorted by
       length, batch_size 64, batch_tokens 4096, widths padded to a multiple of 8);
     * export: a client that imports only tensorflow and tensorflow_text,
       sorts the lines by length (--client_sort: characters, or the model's
       own pieces counted with the vocabulary in the export's assets) and
       sends requests of --client_batch (64) lines to the `serving_default`
       signature.
   sentences/s = lines / median pass time; ratio = export / in-process. Both
   sides stay loaded in their own processes and their timed passes alternate
   (AB, BA, AB, ...), so each pair runs in the same minutes: ratio_per_pass and
   its median are the drift-proof figures. The outputs of both are compared
   line by line (reported: identical lines).
3. Latency of the export: one line per request, the first --latency_lines
   lines, after one untimed pass over them; p50 and p95 of the wall time of
   the call, in milliseconds.

Each side runs in its own subprocess of this script (`--worker`), both alive
at once but never computing at the same time; pin the whole run to one core
(taskset) and keep the host quiet, or say it was not.

  taskset -c 0 env TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 \\
    python bench/export_speed.py --problem=multi30k_ende --data_dir=DATA --output_dir=RUN
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CLIENT_IMPORTS = ("tensorflow", "tensorflow_text")


def _lines(args):
  path = os.path.join(args.data_dir, f"{args.problem}-test.inputs")
  with open(path, encoding="utf-8") as f:
    return f.read().split("\n")[:-1][:args.lines]


class InProcessSide:
  """t2t-decoder's own path: `DecodePipeline.decode` over all the lines, its batching."""

  def __init__(self, args):
    from t2tlite import registry
    from t2tlite.decoding.loading import load_pipeline
    registry.load_all()
    self.pipeline, self.checkpoint = load_pipeline(
        args.output_dir, registry.problem(args.problem), args.data_dir, args.decode_hparams,
        args.checkpoint_path)
    self.lines = _lines(args)

  def one_pass(self):
    return self.pipeline.decode(self.lines).lines

  def latency(self):
    return []

  def info(self):
    return dict(checkpoint=self.checkpoint)


def _client_length(args, lines):
  """The key the client sorts its lines by before cutting them into requests.

  chars: the line's length in characters (a client that knows nothing of the
  model). tokens: its length in the model's own pieces, counted with the
  sentencepiece model the export carries in assets/ (what t2t-decoder sorts by),
  still without importing t2tlite.
  """
  import glob
  if args.client_sort == "chars":
    return lambda i: len(lines[i])
  import tensorflow as tf
  import tensorflow_text
  models = glob.glob(os.path.join(args.export, "assets", "*.model"))
  if len(models) != 1:
    sys.exit(f"--client_sort=tokens: expected one sentencepiece .model in {args.export}/assets")
  with open(models[0], "rb") as f:
    tokenizer = tensorflow_text.SentencepieceTokenizer(model=f.read())
  counts = tokenizer.tokenize(tf.constant(lines)).row_lengths().numpy()
  return lambda i: int(counts[i])


class ExportSide:
  """A client of the SavedModel that imports only tensorflow and tensorflow_text."""

  def __init__(self, args):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    self.tf = tf
    self.serve = tf.saved_model.load(args.export).signatures["serving_default"]
    self.lines = _lines(args)
    order = sorted(range(len(self.lines)), key=_client_length(args, self.lines))
    self.batches = [order[i:i + args.client_batch]
                    for i in range(0, len(order), args.client_batch)]
    self.latency_lines = args.latency_lines

  def one_pass(self):
    outputs = [None] * len(self.lines)
    for batch in self.batches:
      texts = self.serve(inputs=self.tf.constant([self.lines[i] for i in batch]))["outputs"]
      for i, text in zip(batch, texts.numpy()):
        outputs[i] = text.decode("utf-8")
    return outputs

  def latency(self):
    """Seconds per call of one line per request, after one untimed call per line."""
    single = self.lines[:self.latency_lines]
    for line in single:  # Warm: every single-line width traced and compiled.
      self.serve(inputs=self.tf.constant([line]))
    times = []
    for line in single:
      start = time.perf_counter()
      self.serve(inputs=self.tf.constant([line]))["outputs"].numpy()
      times.append(time.perf_counter() - start)
    return times

  def info(self):
    # Must stay empty: the client runs without t2tlite.
    return dict(foreign_modules=[m for m in sys.modules if m.split(".")[0] == "t2tlite"][:5])


def serve_worker(side):
  """Answers the driver's commands on stdin, one JSON line each on stdout.

  warm / pass: one pass over the lines, its seconds (the outputs with "pass");
  latency: the single-line call times; info: what the side reports about itself.
  The driver keeps both sides alive and alternates their passes, so each pair
  of passes runs in the same minutes on a host whose speed drifts.
  """
  for command in sys.stdin:
    command = command.strip()
    if command in ("warm", "pass"):
      start = time.perf_counter()
      outputs = side.one_pass()
      reply = dict(seconds=time.perf_counter() - start)
      if command == "pass":
        reply["outputs"] = outputs
    elif command == "latency":
      reply = dict(latency=side.latency())
    elif command == "info":
      reply = side.info()
    else:
      break
    print(json.dumps(reply), flush=True)


class Worker:
  """One side in its own process (its own TensorFlow runtime), driven line by line."""

  def __init__(self, args, kind, **extra):
    cmd = [sys.executable, os.path.abspath(__file__), f"--worker={kind}"] + [
        f"--{k}={v}" for k, v in dict(vars(args), **extra).items()
        if v is not None and k != "worker"]
    self.kind = kind
    self.stderr = tempfile.TemporaryFile(mode="w+")
    self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=self.stderr, text=True)

  def ask(self, command):
    self.proc.stdin.write(command + "\n")
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line:
      self.proc.wait()
      self.stderr.seek(0)
      sys.exit(f"worker {self.kind} failed ({self.proc.returncode}):\n{self.stderr.read()[-3000:]}")
    return json.loads(line)

  def close(self):
    self.proc.stdin.close()
    self.proc.wait()
    self.stderr.close()


def _size(path):
  sizes = {}
  for d, _, files in os.walk(path):
    for f in files:
      part = os.path.relpath(os.path.join(d, f), path).split(os.sep)[0]
      sizes[part] = sizes.get(part, 0) + os.path.getsize(os.path.join(d, f))
  return sizes


def _percentile(values, q):
  values = sorted(values)
  return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--problem", default="multi30k_ende")
  parser.add_argument("--data_dir", required=True)
  parser.add_argument("--output_dir", required=True, help="The trained run.")
  parser.add_argument("--checkpoint_path", default=None)
  parser.add_argument("--decode_hparams", default="", help="Both sides; default the problem's.")
  parser.add_argument("--lines", type=int, default=1000)
  parser.add_argument("--reps", type=int, default=1)
  parser.add_argument("--client_batch", type=int, default=64)
  parser.add_argument("--client_sort", default="chars", choices=("chars", "tokens"),
                      help="How the export's client orders lines into requests (_client_length).")
  parser.add_argument("--latency_lines", type=int, default=100)
  parser.add_argument("--export", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--json", default=None, help="Also write the results here.")
  args = parser.parse_args()
  if args.worker:
    serve_worker({"inprocess": InProcessSide, "export": ExportSide}[args.worker](args))
    return

  export_dir = tempfile.mkdtemp(prefix="export_speed-")
  cmd = [os.path.join(os.path.dirname(sys.executable), "t2t-exporter"),
         f"--problem={args.problem}", f"--data_dir={args.data_dir}",
         f"--output_dir={args.output_dir}", f"--export_dir={export_dir}",
         f"--decode_hparams={args.decode_hparams}"]
  if args.checkpoint_path:
    cmd.append(f"--checkpoint_path={args.checkpoint_path}")
  start = time.perf_counter()
  proc = subprocess.run(cmd, capture_output=True, text=True)
  command_s = time.perf_counter() - start
  if proc.returncode != 0:
    sys.exit(proc.stderr[-3000:])
  version = proc.stdout.strip().splitlines()[-1]
  with open(os.path.join(version, "assets.extra", "t2tlite_export.json")) as f:
    info = json.load(f)
  sizes = _size(version)

  inproc = Worker(args, "inprocess")
  exported = Worker(args, "export", export=version)
  warm = {w.kind: w.ask("warm")["seconds"] for w in (inproc, exported)}  # Traced and compiled.
  times = {inproc.kind: [], exported.kind: []}
  outputs = {}
  for rep in range(args.reps):  # Alternating: AB, BA, AB, ... so neither side always goes first.
    for w in ((inproc, exported) if rep % 2 == 0 else (exported, inproc)):
      reply = w.ask("pass")
      times[w.kind].append(reply["seconds"])
      outputs[w.kind] = reply["outputs"]
    print(f"pass {rep + 1}/{args.reps}: in-process {times['inprocess'][-1]:.2f}s, export "
          f"{times['export'][-1]:.2f}s", file=sys.stderr, flush=True)
  latency_ms = [1000 * t for t in exported.ask("latency")["latency"]]
  in_info, ex_info = inproc.ask("info"), exported.ask("info")
  inproc.close()
  exported.close()
  n = len(outputs["inprocess"])
  in_rate = n / statistics.median(times["inprocess"])
  ex_rate = n / statistics.median(times["export"])
  per_pass = [i / e for i, e in zip(times["inprocess"], times["export"])]  # export / in-process
  same = sum(a == b for a, b in zip(outputs["inprocess"], outputs["export"]))
  result = dict(
      checkpoint=in_info["checkpoint"], decode_hparams=info["decode_hparams"], lines=n,
      export_command_s=round(command_s, 1), export_save_s=info["seconds"],
      export_mb=round(sum(sizes.values()) / 2**20, 2),
      export_parts_mb={k: round(v / 2**20, 3) for k, v in sorted(sizes.items())},
      inprocess_sentences_per_s=round(in_rate, 2), export_sentences_per_s=round(ex_rate, 2),
      ratio=round(ex_rate / in_rate, 3),
      ratio_per_pass=[round(r, 3) for r in per_pass],
      ratio_median_of_passes=round(statistics.median(per_pass), 3),
      seconds_per_pass={k: [round(t, 2) for t in v] for k, v in times.items()},
      client_batch=args.client_batch,
      client_sort=args.client_sort,
      identical_lines=f"{same}/{n}", warmup_s={k: round(v, 1) for k, v in warm.items()},
      latency_ms=dict(p50=round(_percentile(latency_ms, 50), 1),
                      p95=round(_percentile(latency_ms, 95), 1), lines=len(latency_ms)),
      client_foreign_modules=ex_info["foreign_modules"])
  print(json.dumps(result, indent=2))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  main()
