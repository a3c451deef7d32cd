"""What tracing t2t-trainer's train step costs: seconds, and graph ops built against ops kept.

Why
---
Every `t2t-trainer` start traces its train step before the first update (without XLA once,
for any shape: train_step.trace_for_any_shape), and the test suite starts dozens of them.
Tracing builds the step's graph one op at a time in Python, about a millisecond an op on
these CPUs, so its cost is its op count. Two things once inflated it: an optimizer whose
slots were made inside the first trace (TensorFlow then traced the whole step a second
time: twice the ops built for the ops kept) and Adam's scalar arguments made once per
variable. This builds the step as the trainer does (train_throughput.build_tf_step, fresh
for every round), traces it for any shape, and prints the seconds and both op counts:
built within a few percent of kept (graph ops the saved functions drop) means one trace;
twice kept, two.

  python bench/trace_cost.py --shape tiny --rounds 3
  python bench/trace_cost.py --shape base --output_json trace.json
"""

import argparse
import collections
import json
import os
import statistics
import time

import train_throughput  # A sibling script (its folder is on sys.path when run): the shapes.

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--shape", default="tiny", choices=("tiny", "base"))
  p.add_argument("--vocab", type=int, default=0, help="0: the shape's default vocabulary")
  p.add_argument("--dtype", default="float32", choices=("float32", "mixed_bfloat16"))
  p.add_argument("--rounds", type=int, default=1, help="fresh models and steps traced")
  p.add_argument("--output_json", default="")
  return p.parse_args(argv)


class OpsBuilt:
  """Counts the graph ops created while the block runs, by graph name (a private TF hook)."""

  def __enter__(self):
    from tensorflow.python.framework import ops
    self.by_graph = collections.Counter()
    self._ops, self._original = ops, ops.Graph._create_op_internal
    counts, original = self.by_graph, self._original

    def counting(graph, *args, **kwargs):
      counts[graph.name] += 1
      return original(graph, *args, **kwargs)
    ops.Graph._create_op_internal = counting
    return self

  def __exit__(self, *exc):
    self._ops.Graph._create_op_internal = self._original
    return False


def ops_kept(concrete_function) -> collections.Counter:
  """{op type: count} of the traced step: its own graph and every function it calls."""
  graph_def = concrete_function.graph.as_graph_def()
  nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
  return collections.Counter(node.op for node in nodes)


def trace_once(hp):
  """{seconds, built, kept, variables} of one fresh step traced for any shape."""
  import tensorflow as tf
  from t2tlite.training import train_step
  model, step = train_throughput.build_tf_step(hp, tf.distribute.get_strategy())
  batch = {"inputs": tf.ones([2, 5], tf.int32), "targets": tf.ones([2, 6], tf.int32)}
  with OpsBuilt() as built:
    start = time.perf_counter()
    train_step.trace_for_any_shape(step, batch)
    seconds = time.perf_counter() - start
  concrete = step.get_concrete_function(tf.nest.map_structure(
      lambda t: tf.TensorSpec([None, None], t.dtype), batch))
  kept = ops_kept(concrete)
  return {"seconds": seconds, "built": sum(built.by_graph.values()), "kept": sum(kept.values()),
          "variables": len(model.trainable_variables), "kept_by_type": dict(kept)}


def main(argv=None):
  args = parse_args(argv)
  hparams_set, default_vocab, _, _ = train_throughput.SHAPES[args.shape]
  from t2tlite import registry
  vocab = args.vocab or default_vocab
  hp = registry.hparams(hparams_set).replace(input_vocab_size=vocab, target_vocab_size=vocab)
  hp = hp.override(f"xla=false,dtype={args.dtype}")
  rounds = [trace_once(hp) for _ in range(args.rounds)]
  seconds = [r["seconds"] for r in rounds]
  result = dict(rounds[0], shape=args.shape, dtype=args.dtype, vocab=vocab,
                seconds_min=min(seconds), seconds_median=statistics.median(seconds),
                seconds=seconds)
  print(f"{args.shape} {args.dtype}: traced in {result['seconds_median']:.2f} s median "
        f"({min(seconds):.2f}-{max(seconds):.2f} s over {args.rounds}); ops built "
        f"{result['built']}, kept {result['kept']} ({result['variables']} variables)")
  if args.output_json:
    with open(args.output_json, "w") as f:
      json.dump(result, f, indent=1)
  return result


if __name__ == "__main__":
  main()
