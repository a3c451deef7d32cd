"""Beam-21 parsing decode speed: attending within horizons against the whole buffer.

Why
---
Parsing decodes with the paper's beam 21 and a maximum length of input + 300. The
cached decoder keeps a fixed [rows, L] key/value buffer; attending over the whole of it,
every step reads (and gathers the beam history of) all L positions, masked past the step,
so a step costs O(input + 300) however short the prefix. With horizons
(`batching.doubling_horizons`, the decoder's default) each step reads only the first H
positions, H the first doubling horizon past the step (`DecoderLayer.call_cached`): a
step costs at most twice its prefix. Both give the same trees (tests/test_decoder.py);
this measures the time.

What is measured
----------------
A trained parsing run (`--output_dir`, its `--data_dir`), the first `--lines` sentences
of a split, decoded with the problem's default decode hparams (beam 21, alpha 0.3,
input + 300, tree constraint) plus `--decode_hparams`, alternately with
`Decoder.first_horizon` = 64 (horizons) and = infinity (the whole buffer), `--rounds` times
each, in one process, after one warm-up round each whose time (tracing and compiling
every batch shape, and that round's search) is reported apart. Prints
sentences/s per round, the median of each, their ratio, the search's loop steps per
batch, and checks the trees agree.

    python bench/parse_decode_speed.py --output_dir=RUN/train --data_dir=RUN/data --lines=40
"""

import argparse
import json
import statistics
import sys
import time

from bench_util import host_cpu_seconds  # pylint: disable=import-error


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--output_dir", required=True, help="the parsing run's training directory")
  p.add_argument("--data_dir", required=True, help="the run's data directory")
  p.add_argument("--problem", default="ptb_sample")
  p.add_argument("--split", default="dev")
  p.add_argument("--lines", type=int, default=40)
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--decode_hparams", default="")
  p.add_argument("--output_json", default="")
  args = p.parse_args(argv)

  from t2tlite import registry
  from t2tlite.decoding.loading import load_pipeline
  from t2tlite.decoding.pipeline import DecodePipeline

  problem = registry.problem(args.problem)
  # As t2t-decoder loads it: the decode hparams under the problem's, XLA's level, the model.
  loaded, checkpoint = load_pipeline(args.output_dir, problem, args.data_dir, args.decode_hparams)
  hp = loaded.hparams
  lines = _read_inputs(args.data_dir, args.problem, args.split, args.lines)
  pipelines = {"horizons": loaded,
               "whole_buffer": DecodePipeline(problem, loaded.decoder.model, hp, args.data_dir)}
  for name, first in (("horizons", 64), ("whole_buffer", 10 ** 9)):
    pipelines[name].decoder.first_horizon = first
  rates = {name: [] for name in pipelines}
  warmup_seconds, steps = {}, {}
  outputs = {}
  for round_index in range(args.rounds + 1):
    for name, pipe in pipelines.items():
      start, busy = time.perf_counter(), host_cpu_seconds()[0]
      out = pipe.decode(lines)
      seconds = time.perf_counter() - start
      outputs[name] = out
      if round_index:  # Round 0 traces and compiles the searches.
        rates[name].append(len(lines) / seconds)
      else:
        warmup_seconds[name] = round(seconds, 2)
        steps[name] = pipe.decoder.last_steps
      print(f"round {round_index} {name}: {len(lines) / seconds:.2f} sentences/s "
            f"({seconds:.1f} s, host busy {host_cpu_seconds()[0] - busy:.1f} cpu-s, "
            f"loop steps per batch {pipe.decoder.last_steps})", file=sys.stderr, flush=True)
  same = outputs["horizons"].lines == outputs["whole_buffer"].lines
  result = dict(checkpoint=checkpoint, lines=len(lines), decode_hparams=str(hp),
                sentences_per_s={k: statistics.median(v) for k, v in rates.items()},
                per_round=rates, warmup_round_seconds=warmup_seconds,
                loop_steps_per_batch=steps, same_trees=same)
  medians = result["sentences_per_s"]
  result["ratio"] = medians["horizons"] / medians["whole_buffer"]
  print(json.dumps(result, indent=1))
  if args.output_json:
    with open(args.output_json, "w") as f:
      json.dump(result, f, indent=1)


def _read_inputs(data_dir, problem_name, split, count):
  """The split's source lines as datagen wrote them (DATA/<problem>-<split>.inputs)."""
  with open(f"{data_dir}/{problem_name}-{split}.inputs", encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f][:count]


if __name__ == "__main__":
  main()
