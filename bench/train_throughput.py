"""Training throughput of t2tlite's Transformer beside peers of identical shape, interleaved.

What is measured
----------------
Target tokens per second of one full training update, on random token ids, for each shape in
--shapes ("base" = hparams set transformer_base with vocab 37000, "tiny" = transformer_tiny with
vocab 8000; override with --base_vocab/--tiny_vocab):

  * ours: the exact step t2t-trainer runs, `t2tlite.training.train_step.make_train_step` on
    `t2tlite.models.transformer.Transformer` with `make_optimizer` (Noam LR, Adam 0.9/0.98/1e-9,
    label-smoothed CE 0.1 with padding masked, accuracy counts, global gradient norm; the whole
    update one XLA cluster when --xla true). Model: post-norm, tied 3-way embeddings, dropout as
    in the hparams set (0.1 residual/embedding). Dtype from --dtype (float32 | mixed_bfloat16 |
    mixed_float16). --devices N mirrors over N logical CPU devices (MirroredStrategy, --batch
    rows per device, as hparams batch_size is per device); --accumulate N sums N micro-batches
    of --batch rows per update (hparams accumulate_steps). A step then trains on
    batch x devices x accumulate rows, and tok/s counts all of them.
  * torch: bench/peers/torch_transformer.py, `torch.nn.Transformer` built to the same shape
    (d_model, heads, d_ff, layers, vocab, post-norm, no attention biases, tied embedding/softmax,
    the hparams set's dropouts, label smoothing 0.1, Adam(0.9, 0.98, 1e-9)), run by --torch_python
    with --torch_threads threads (default 2 = this machine's cores); --torch_amp none,bf16 adds a
    torch.autocast(bfloat16) column.
  * Model Garden (only with --tfm_python, base shape only): ../shared/peers/peerB_tfm.py
    (tf-models-official Seq2SeqTransformer, tf_keras, no XLA), float32 and mixed_bfloat16, with
    its stock pre-norm layers (one more LayerNorm per stack than post-norm: same cost within
    noise). Its post-norm decoder (--tfm_norm_first 0) crashes under mixed_bfloat16 (a
    float32 + bfloat16 add in TransformerDecoderBlock), so pre-norm is the default.

Batch: --batch x --src_len source tokens, --batch x --tgt_len target tokens (64 x 32 x 32), ids
uniform in [2, V) (no padding, no EOS), the same batch every step. Throughput counts target tokens
only: tgt_tok/s = batch * tgt_len / step time, where the step time of one measurement is the
median wall-clock time of --steps timed steps after --warmup untimed steps (the first warm-up
step includes tracing and XLA compilation; each step ends with a host sync on the loss).

Real batches, packed vs bucketed (shapes "multi30k" and "multi30k_packed", ours only): the
hparams sets transformer_multi30k and transformer_multi30k_packed (vocab 8000), trained on the
batches t2t-trainer would draw from Multi30k train en-de (../shared/data/multi30k, read in place;
an 8000-piece BPE vocabulary learned on it once per invocation, both sides, as
bench/padding_efficiency.py does): `input_pipeline.training_dataset` with seed 1, length
buckets for the first, packed rows (16 x 128 tokens per side) for the second, both about 2048
padded tokens per side per batch. The step is the same train step; the batches differ in shape
(buckets) and so in cost. Reported: real (non-pad) target tokens per second = the real target
tokens of the --steps timed batches over their summed step times. The --warmup + --steps batches
are first run once untimed, so every batch shape has been traced and compiled before the timed
pass over the same batches (whose first --warmup are untimed too): without XLA the bucketed
stream traces twice and then runs shape-relaxed, but the loss over the vocabulary (hparams
`xla_loss`) compiles once per batch shape, which the trainer pays once per shape in a run of
thousands of steps; the untimed pass's seconds are reported as first_pass_s. Use --xla false,
the trainer's CPU default (with XLA the whole step compiles once per bucket shape). The two
shapes are interleaved within each round; the table adds their per-round ratio. The row's
padding efficiency (real / all target positions) is reported too.

Backends (--backend): tensorflow (default) times the tf.function step above; jax times the same
model under Keras's JAX backend, `t2tlite.training.jax_step.JaxTrainer` (the step
`t2t-trainer --backend=jax` runs: stateless_call + stateless_apply under jax.jit, the same loss,
optimizer and schedule), on whatever device JAX sees (a GPU where there is one). Under jax the
driver and its workers import no TensorFlow, so the bench runs on a machine without it (random-id
shapes only; the Multi30k shapes need tf.data). The GPU comparison the backends issue asks for:

  python bench/train_throughput.py --backend jax --shapes base --dtype mixed_bfloat16 \
      --lengths 32,64,128 --tokens_per_step 25000 --torch_python python3 --torch_device cuda \
      --torch_compile --torch_amp bf16 --peak_tflops 989 --warmup 5 --steps 20 --rounds 1 \
      [--stock_keras_script PATH/gpu_peers.py]

--lengths L1,L2 measures each shape at source = target length L (one column group per length);
--tokens_per_step N sets the rows to N // L (the paper's ~25k target tokens per step).
--peak_tflops P adds MFU = (matmul FLOPs per step / step time) / P, the FLOP formula of
../shared/peers/flops.py (train_flops_per_step below), for every system alike.
--stock_keras_script runs the same shape written in stock Keras 3 layers on JAX (the shared
peers' gpu_peers.py `keras_jax`, base shape, mixed_bfloat16) as one more column.

Every measurement is a fresh subprocess (its own TF/torch runtime and thread pool). The machine's
speed drifts (up to 2x over minutes), so the systems are interleaved: for each of --rounds rounds
and each shape, run ours[, ours with the other --xla if --compare_xla][, --ours_variants],
torch[, Model Garden fp32, bf16]. Reported per system: the median over rounds of tgt tok/s;
ratios ours/peer are computed within each round (same minutes) and the median of those per-round
ratios is reported. The host is shared: each measurement records the cores other processes used
while it ran (/proc/stat busy time minus the worker's own CPU time), the table warns above 0.3,
and --quiet_wait S waits up to S seconds before each measurement for the host to go quiet.

Usage:
  python bench/train_throughput.py --shapes base,tiny
  python bench/train_throughput.py --shapes base --dtype mixed_bfloat16 --compare_xla
  python bench/train_throughput.py --backend jax --shapes base --dtype mixed_bfloat16 \
      --lengths 32,64 --tokens_per_step 25000 --compare_flash      # cuDNN flash kernel or not
  python bench/train_throughput.py --shapes base --tfm_python $T2TLITE_TFM_PYTHON
  python bench/train_throughput.py --shapes multi30k,multi30k_packed --xla false \
      --torch_python '' --rounds 3                                # packed vs bucketed, real text
  python bench/train_throughput.py --shapes base --torch_python '' --xla false \
      --ours_variants float32:false:2,mixed_bfloat16:false,mixed_bfloat16:false:2
Prints a table; --output_json writes every raw step time, the machine and the flags.
"""

import argparse
import collections
import datetime
import json
import os
import statistics
import sys
import time

from bench_util import machine_info, peak_rss_mb, read_pairs, run_worker, shared_path, str2bool  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SHORT_DTYPE = {"float32": "fp32", "mixed_bfloat16": "bf16", "mixed_float16": "fp16"}
BACKENDS = ("tensorflow", "jax")
HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PEER = os.path.join(HERE, "peers", "torch_transformer.py")
TFM_PEER_DEFAULT = shared_path("peers", "peerB_tfm.py")

SHAPES = {  # name -> (hparams set, default vocab, default warmup, default timed steps)
    "base": ("transformer_base", 37000, 2, 4),
    "tiny": ("transformer_tiny", 8000, 3, 15),
    "multi30k": ("transformer_multi30k", 8000, 3, 40),
    "multi30k_packed": ("transformer_multi30k_packed", 8000, 3, 40),
}
REAL_DATA = ("multi30k", "multi30k_packed")  # Shapes trained on real Multi30k batches.
MULTI30K = shared_path("data", "multi30k")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--shapes", default="base,tiny", help="comma list of: " + ",".join(SHAPES))
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--backend", default="tensorflow",
                 help="ours: the Keras backend of the step, tensorflow or jax (jax imports no "
                      "TensorFlow); a comma list measures ours on each, interleaved, with ratios")
  p.add_argument("--lengths", default="",
                 help="comma list of lengths L, each measured at source = target length L "
                      "(default: --src_len / --tgt_len)")
  p.add_argument("--tokens_per_step", type=int, default=0,
                 help="rows per step = this // target length (0 = --batch rows)")
  p.add_argument("--peak_tflops", type=float, default=0.0,
                 help="the device's peak (e.g. 989 for an H100's dense bf16): adds an MFU column")
  p.add_argument("--dtype", default="float32", choices=list(SHORT_DTYPE),
                 help="ours: hparams dtype")
  p.add_argument("--devices", type=int, default=1,
                 help="ours: logical CPU devices to mirror over (MirroredStrategy when > 1)")
  p.add_argument("--accumulate", type=int, default=1,
                 help="ours: hparams accumulate_steps (micro-batches per update)")
  p.add_argument("--xla", type=str2bool, default=True, help="ours: hparams xla")
  p.add_argument("--compare_xla", action="store_true",
                 help="also measure ours with the opposite --xla in every round")
  p.add_argument("--flash_attention", type=str2bool, default=False,
                 help="ours: hparams flash_attention (a fused flash kernel where Keras has one)")
  p.add_argument("--compare_flash", action="store_true",
                 help="also measure ours with the opposite --flash_attention in every round")
  p.add_argument("--pipelined", action="store_true",
                 help="ours under JAX: also time the steps dispatched back to back with one host "
                      "sync at the end, as t2t-trainer runs (it reads the loss at log lines only); "
                      "the table's main figure stays one sync per step, the peers' method")
  p.add_argument("--ours_variants", default="",
                 help="more configurations of ours measured in every round, comma list of "
                      "DTYPE:XLA[:DEVICES[:ACCUMULATE]], e.g. mixed_bfloat16:false,float32:false:2")
  p.add_argument("--batch", type=int, default=64)
  p.add_argument("--src_len", type=int, default=32)
  p.add_argument("--tgt_len", type=int, default=32)
  p.add_argument("--base_vocab", type=int, default=SHAPES["base"][1])
  p.add_argument("--tiny_vocab", type=int, default=SHAPES["tiny"][1])
  p.add_argument("--warmup", type=int, default=None,
                 help="untimed steps per measurement (default: base 2, tiny 3)")
  p.add_argument("--steps", type=int, default=None,
                 help="timed steps per measurement (default: base 4, tiny 15)")
  p.add_argument("--torch_python", default=os.environ.get("T2TLITE_TORCH_PYTHON", ""),
                 help="interpreter with torch (default $T2TLITE_TORCH_PYTHON); empty skips the "
                      "torch peer")
  p.add_argument("--torch_threads", type=int, default=2)
  p.add_argument("--torch_device", default="cpu", choices=["cpu", "cuda"])
  p.add_argument("--torch_compile", action="store_true", help="torch peer under torch.compile")
  p.add_argument("--torch_amp", default="none",
                 help="comma list of none|bf16 (torch.autocast bfloat16); each is a column")
  p.add_argument("--tfm_python", default="",
                 help="interpreter with tf-models-official 2.20; enables the Model Garden peer "
                      "(base shape only)")
  p.add_argument("--tfm_script", default=TFM_PEER_DEFAULT)
  p.add_argument("--tfm_policies", default="float32,mixed_bfloat16")
  p.add_argument("--tfm_norm_first", type=int, default=1,
                 help="Model Garden's stock pre-norm (1, as the project's bar was measured); 0 = "
                      "post-norm like ours, which fails under mixed_bfloat16 in Model Garden 2.20")
  p.add_argument("--stock_keras_script", default="",
                 help="the shared peers' gpu_peers.py: adds stock Keras 3 layers on JAX (base "
                      "shape, mixed_bfloat16, source = target length) as a column")
  p.add_argument("--stock_keras_python", default=sys.executable,
                 help="interpreter with keras and jax for --stock_keras_script")
  p.add_argument("--output_json", default="")
  p.add_argument("--timeout", type=int, default=1800, help="seconds per measurement subprocess")
  p.add_argument("--quiet_wait", type=float, default=0.0,
                 help="before each measurement wait up to this many seconds for other processes "
                      "to use < --quiet_cores cores (the host is shared; 0 = don't wait)")
  p.add_argument("--quiet_cores", type=float, default=0.3)
  p.add_argument("--verbose", action="store_true", help="pass the workers' stderr through")
  # Worker mode (internal): one measurement of ours in this process, one JSON line on stdout.
  p.add_argument("--worker", default="", choices=["", "ours"], help=argparse.SUPPRESS)
  p.add_argument("--shape", default="base", help=argparse.SUPPRESS)
  p.add_argument("--vocab_model", default="", help=argparse.SUPPRESS)
  p.add_argument("--packed_length", type=int, default=0,
                 help="multi30k_packed: rows of this many tokens per side (0 = the set's 128; "
                      "rows per batch follow, batch_size // packed_length)")
  p.add_argument("--multi30k_dir", default=MULTI30K,
                 help="Multi30k files for the multi30k shapes (train.en.gz, train.de.gz)")
  return p.parse_args(argv)


class Case(collections.namedtuple("Case", "name shape batch src_len tgt_len")):
  """One column group of the table: a shape at one batch and length."""


def cases(args):
  """[Case] for every shape in --shapes and length in --lengths, in that order."""
  shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
  for s in shapes:
    if s not in SHAPES:
      sys.exit(f"--shapes: unknown shape {s!r}; choose from {sorted(SHAPES)}")
    if s in REAL_DATA and not tensorflow_available():
      sys.exit(f"--shapes={s}: the Multi30k batches come from tf.data, and TensorFlow is not "
               "installed here; only the random-id shapes run (base, tiny)")
  try:
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
  except ValueError:
    sys.exit(f"--lengths: expected a comma list of integers, got {args.lengths!r}")
  pairs = [(n, n) for n in lengths] or [(args.src_len, args.tgt_len)]
  out = []
  for s in shapes:
    for src_len, tgt_len in pairs:
      batch = args.tokens_per_step // tgt_len if args.tokens_per_step else args.batch
      if batch < 1:
        sys.exit(f"--tokens_per_step={args.tokens_per_step}: fewer than one row of {tgt_len}")
      out.append(Case(s if len(pairs) == 1 else f"{s}@{tgt_len}", s, batch, src_len, tgt_len))
  return out


def tensorflow_available():
  from t2tlite import backends
  return backends.tensorflow_available()


def steps_for(args, shape):
  _, _, w, n = SHAPES[shape]
  return (args.warmup if args.warmup is not None else w,
          args.steps if args.steps is not None else n)


def vocab_for(args, shape):
  return {"base": args.base_vocab}.get(shape, args.tiny_vocab)


def hparams_for(args, shape, xla=None, dtype=None):
  from t2tlite import registry
  V = vocab_for(args, shape)
  hp = registry.hparams(SHAPES[shape][0]).replace(input_vocab_size=V, target_vocab_size=V)
  xla = args.xla if xla is None else xla
  dtype = dtype or args.dtype
  if shape == "multi30k_packed" and args.packed_length:
    hp = hp.replace(packed_length=args.packed_length)
  return hp.override(f"xla={'true' if xla else 'false'},dtype={dtype},"
                     f"accumulate_steps={args.accumulate},"
                     f"flash_attention={'true' if args.flash_attention else 'false'}")


def train_flops_per_step(B, S, T, d, ff, Le, Ld, V):
  """Matmul FLOPs of one training step (3 x forward), the formula of ../shared/peers/flops.py:
  per source token 2*P_enc + Le*4*S*d, per target token 2*P_dec + 2*d*V + Ld*4*(T+S)*d."""
  Pe, Pd = Le * (4 * d * d + 2 * d * ff), Ld * (8 * d * d + 2 * d * ff)
  return 3 * (B * S * (2 * Pe + Le * 4 * S * d) + B * T * (2 * Pd + 2 * d * V + Ld * 4 * (T + S) * d))


def step_flops(hp, B, S, T):
  """train_flops_per_step of hparams `hp` at B rows, source length S, target length T."""
  return train_flops_per_step(B, S, T, hp.d_model, hp.d_ff, hp.num_encoder_layers,
                              hp.num_decoder_layers, hp.target_vocab_size)


# --------------------------------------------------------------------------------------------
# Worker: one measurement of t2tlite in this process.
# --------------------------------------------------------------------------------------------
def time_steps(step, batch, warmup, steps, tag, call_times=None):
  """(timed step seconds, warm-up step seconds, per-token losses) of warmup + steps updates.

  `step(batch)` returns the metric sums; reading the loss is the host sync that ends a step.
  `call_times`, a list, gets each timed step's seconds until `step` returned (before the
  sync): the host's share where the device runs the step asynchronously.
  """
  times, warm_times, losses = [], [], []
  for i in range(warmup + steps):
    t0 = time.perf_counter()
    sums = step(batch)
    if call_times is not None and i >= warmup:
      call_times.append(time.perf_counter() - t0)
    loss = float(sums["loss"]) / float(sums["tokens"])  # host sync
    dt = time.perf_counter() - t0
    (times if i >= warmup else warm_times).append(dt)
    losses.append(loss)
    print(f"[{tag}] step {i} {dt:.3f}s loss {loss:.3f}", file=sys.stderr, flush=True)
  return times, warm_times, losses


def time_pipelined(step, batch, steps):
  """Seconds per update of `steps` updates dispatched back to back with one host sync at the
  end, as t2t-trainer runs (it reads the loss at log lines only)."""
  start = time.perf_counter()
  for _ in range(steps):
    sums = step(batch)
  float(sums["loss"])  # The one host sync.
  return (time.perf_counter() - start) / steps


def run_ours(args):
  return run_ours_jax(args) if args.backend == "jax" else run_ours_tensorflow(args)


def run_ours_jax(args):
  """One measurement of the JAX step (jax_step.JaxTrainer) on random ids; imports no TensorFlow."""
  import jax
  import jax.numpy as jnp
  import keras
  import numpy as np
  from t2tlite.training.jax_step import JaxTrainer

  if args.devices != 1:
    sys.exit("--devices: under --backend jax the step runs on one JAX device here")
  hp = hparams_for(args, args.shape)
  warmup, steps = steps_for(args, args.shape)
  V, S, T = hp.target_vocab_size, args.src_len, args.tgt_len
  B = args.batch * args.accumulate
  model, optimizer = build_model(hp)
  trainer = JaxTrainer(model, optimizer, hp)
  if args.shape in REAL_DATA:  # tf.data batches (TensorFlow present), as t2t-trainer feeds them.
    return dict(run_real_batches(
        args, hp, model, lambda b: trainer.train_step({k: v.numpy() for k, v in b.items()}),
        warmup, steps), backend="jax", jax=jax.__version__, traces=trainer.train_traces)
  rng = np.random.default_rng(1)
  batch = {"inputs": jnp.asarray(rng.integers(2, V, (B, S)), jnp.int32),
           "targets": jnp.asarray(rng.integers(2, V, (B, T)), jnp.int32)}
  times, warm_times, losses = time_steps(trainer.train_step, batch, warmup, steps, "ours jax")
  med = statistics.median(times)
  fl = step_flops(hp, B, S, T)
  device = jax.devices()[0]
  pipelined = {}
  if args.pipelined:
    per_step = time_pipelined(trainer.train_step, batch, steps)
    pipelined = dict(pipelined_step_s=per_step, pipelined_tgt_tok_per_s=B * T / per_step)
  return dict(system="t2tlite", backend="jax", jax=jax.__version__, keras=keras.__version__,
              device=f"{device.platform}:{device.device_kind}", traces=trainer.train_traces,
              tensorflow_loaded=any(m.split(".")[0] == "tensorflow" for m in sys.modules),
              hparams_set=SHAPES[args.shape][0], dtype=hp.dtype, accumulate=args.accumulate,
              tokens_per_update=B * T,
              params=int(sum(int(np.prod(v.shape)) for v in model.trainable_variables)),
              batch=B, src_len=S, tgt_len=T, warmup=warmup, warmup_step_times_s=warm_times,
              step_times_s=times, median_step_s=med, tgt_tok_per_s=B * T / med,
              achieved_gflops=fl / med / 1e9, first_loss=losses[0], last_loss=losses[-1],
              **pipelined)


def build_model(hp, scope=None):
  """(model, optimizer): the Transformer and t2t-trainer's optimizer, built from seed 0
  (inside `scope`, a tf.distribute strategy's, where one is given)."""
  import contextlib
  import keras
  from t2tlite.models.transformer import Transformer
  from t2tlite.training.optimization import make_optimizer
  keras.utils.set_random_seed(0)
  with scope or contextlib.nullcontext():
    model = Transformer(hp)
    optimizer = make_optimizer(hp)
    optimizer.build(model.trainable_variables)
  return model, optimizer


def build_tf_step(hp, strategy):
  """(model, step): build_model's pair under `strategy` and t2t-trainer's tf.function train
  step (bench/step_profile.py profiles the same step)."""
  from t2tlite.training.train_step import make_train_step
  model, optimizer = build_model(hp, strategy.scope())
  return model, make_train_step(model, optimizer, hp, strategy)


def run_ours_tensorflow(args):
  import numpy as np
  import tensorflow as tf
  import keras
  from t2tlite.training import distribution

  strategy = distribution.make_strategy(cpu_devices=args.devices)  # Before any op runs.
  hp = hparams_for(args, args.shape)
  warmup, steps = steps_for(args, args.shape)
  V, S, T = hp.target_vocab_size, args.src_len, args.tgt_len
  B = args.batch * args.devices * args.accumulate  # Rows per update (global batch).
  model, step = build_tf_step(hp, strategy)
  if args.shape in REAL_DATA:
    return run_real_batches(args, hp, model, step, warmup, steps)
  rng = np.random.default_rng(1)
  batch = {"inputs": tf.constant(rng.integers(2, V, (B, S)), tf.int32),
           "targets": tf.constant(rng.integers(2, V, (B, T)), tf.int32)}
  times, warm_times, losses = time_steps(step, batch, warmup, steps, "ours")
  med = statistics.median(times)
  fl = step_flops(hp, B, S, T)
  return dict(system="t2tlite", backend="tensorflow", tf=tf.__version__, keras=keras.__version__,
              hparams_set=SHAPES[args.shape][0], dtype=hp.dtype, xla=hp.xla,
              devices=args.devices, accumulate=args.accumulate,
              strategy=distribution.describe(strategy), tokens_per_update=B * T,
              params=int(sum(int(np.prod(v.shape)) for v in model.trainable_variables)),
              intra_op=tf.config.threading.get_intra_op_parallelism_threads(),
              inter_op=tf.config.threading.get_inter_op_parallelism_threads(),
              batch=B, src_len=S, tgt_len=T, warmup=warmup, warmup_step_times_s=warm_times,
              step_times_s=times, median_step_s=med, tgt_tok_per_s=B * T / med,
              achieved_gflops=fl / med / 1e9, first_loss=losses[0], last_loss=losses[-1])


def multi30k_train_pairs(args):
  """(pairs, LineStats) of Multi30k train en-de under --multi30k_dir."""
  return read_pairs(os.path.join(args.multi30k_dir, "train.en.gz"),
                    os.path.join(args.multi30k_dir, "train.de.gz"))


def multi30k_dataset(args):
  """Multi30k train en-de as examples {"inputs", "targets"} (ids + EOS) under --vocab_model."""
  import sentencepiece as spm
  from t2tlite.data import records
  pairs, _ = multi30k_train_pairs(args)
  sp = spm.SentencePieceProcessor(model_file=args.vocab_model)
  sources, targets = sp.encode([p[0] for p in pairs]), sp.encode([p[1] for p in pairs])
  return records.in_memory_dataset([{"inputs": s + [1], "targets": t + [1]}
                                    for s, t in zip(sources, targets)])


def run_real_batches(args, hp, model, step, warmup, steps):
  """Times `step` on the trainer's own Multi30k batches; real target tokens per second."""
  import numpy as np
  import tensorflow as tf
  import keras
  from t2tlite.training import input_pipeline
  batches = list(input_pipeline.training_dataset(multi30k_dataset(args), hp, seed=1)
                 .take(warmup + steps))
  # A first pass over the same batches, untimed, meets every batch shape once. Without XLA
  # the step runs shape-relaxed after its second trace, but the loss over the vocabulary
  # (hparams xla_loss) compiles once per batch shape: timed in one pass, a bucketed stream
  # of many shapes would be charged those compilations and a packed stream (one shape) not,
  # where the trainer pays them once per shape in a run of thousands of steps.
  first_pass_s = 0.0
  for batch in batches:
    t0 = time.perf_counter()
    float(step(batch)["loss"])  # host sync
    first_pass_s += time.perf_counter() - t0
  distinct = len({tuple(b["targets"].shape) for b in batches})
  print(f"[ours] first pass over {len(batches)} batches ({distinct} shapes), untimed: "
        f"{first_pass_s:.1f}s", file=sys.stderr, flush=True)
  times, real, padded, flops, shapes, losses = [], 0, 0, 0.0, set(), []
  for i, batch in enumerate(batches):
    t0 = time.perf_counter()
    metrics = step(batch)
    loss = float(metrics["loss"]) / float(metrics["tokens"])  # host sync
    dt = time.perf_counter() - t0
    losses.append(loss)
    rows, length = batch["targets"].shape
    print(f"[ours] step {i} {dt:.3f}s {rows}x{length} loss {loss:.3f}", file=sys.stderr,
          flush=True)
    if i < warmup:
      continue
    times.append(dt)
    real += int(np.count_nonzero(batch["targets"].numpy()))
    padded += rows * length
    shapes.add(f"{rows}x{length}")
    flops += step_flops(hp, rows, batch["inputs"].shape[1], length)
  total = sum(times)
  return dict(system="t2tlite", tf=tf.__version__, keras=keras.__version__,
              hparams_set=SHAPES[args.shape][0], dtype=hp.dtype, xla=hp.xla,
              packed_batches=hp.packed_batches, packed_length=hp.packed_length,
              batch_size=hp.batch_size, warmup=warmup, step_times_s=times,
              median_step_s=statistics.median(times), tgt_tok_per_s=real / total,
              real_target_tokens=real, target_efficiency=real / padded,
              batch_shapes=sorted(shapes), achieved_gflops=flops / total / 1e9,
              first_pass_s=first_pass_s,
              first_loss=losses[0], last_loss=losses[-1])


def learn_multi30k_vocabulary(args, directory):
  """The 8000-piece BPE of the multi30k shapes, learned once on Multi30k train (both sides)."""
  from t2tlite.data import subword
  pairs, _ = multi30k_train_pairs(args)
  lines = [line for pair in pairs for line in pair]
  return subword.train_vocabulary(lines, os.path.join(directory, "multi30k.model"),
                                  args.tiny_vocab, vocab_type="bpe").model_path


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------
def run_subprocess(label, cmd, args, env=None):
  print(f"  - {label} ...", end="", flush=True)
  res, _ = run_worker(cmd, args, env=env)
  if "error" not in res:
    print(f" {res['tgt_tok_per_s']:8.1f} tgt tok/s (median step {res['median_step_s']:.3f}s, "
          f"process {res['wall_s']:.0f}s, other procs {res['foreign_cores_during']:.2f} cores)",
          flush=True)
  return res


def backends_of(args):
  """The backends of --backend, in order: the first is the main one ("ours")."""
  out = [b.strip() for b in args.backend.split(",") if b.strip()]
  bad = [b for b in out if b not in BACKENDS]
  if bad or not out:
    sys.exit(f"--backend={args.backend}: expected a comma list of {', '.join(BACKENDS)}")
  return out


def ours_variants(args):
  """[(dtype, xla, devices, accumulate, backend, flash)]: the main configuration on each
  backend of --backend, then --compare_xla's, --compare_flash's and --ours_variants' (on the
  main backend)."""
  main_backend, *more = backends_of(args)
  flash = args.flash_attention
  out = [(args.dtype, args.xla, args.devices, args.accumulate, b, flash)
         for b in [main_backend] + more]
  if args.compare_xla:
    out.append((args.dtype, not args.xla, args.devices, args.accumulate, main_backend, flash))
  if args.compare_flash:
    out.append((args.dtype, args.xla, args.devices, args.accumulate, main_backend, not flash))
  for item in [x for x in args.ours_variants.split(",") if x]:
    fields = item.split(":")
    if fields[0] not in SHORT_DTYPE or len(fields) > 4:
      sys.exit(f"--ours_variants: expected DTYPE:XLA[:DEVICES[:ACCUMULATE]] with DTYPE one of "
               f"{sorted(SHORT_DTYPE)}, got {item!r}")
    try:
      v = (fields[0], str2bool(fields[1] if len(fields) > 1 else "true"),
           int(fields[2]) if len(fields) > 2 else 1, int(fields[3]) if len(fields) > 3 else 1,
           main_backend, flash)
    except (ValueError, argparse.ArgumentTypeError) as e:
      sys.exit(f"--ours_variants: {item!r}: {e}")
    if v not in out:
      out.append(v)
  return out


def variant_key(index, variant, main=None):
  dtype, xla, devices, accumulate, backend, flash = variant
  if index == 0:
    return "ours"
  if main is not None and variant[:4] == main[:4] and flash == main[5]:
    return f"ours_{backend}"
  return (f"ours_{SHORT_DTYPE[dtype]}_xla_{'on' if xla else 'off'}" +
          (f"_dev{devices}" if devices != 1 else "") +
          (f"_acc{accumulate}" if accumulate != 1 else "") + ("_flash" if flash else ""))


def systems_for(args, case):
  """[(key, label, cmd, env)] in the order run within a round."""
  shape = case.shape
  hp = hparams_for(args, shape)
  warmup, steps = steps_for(args, shape)
  V = vocab_for(args, shape)
  common = ["--batch", str(case.batch), "--src_len", str(case.src_len),
            "--tgt_len", str(case.tgt_len), "--warmup", str(warmup), "--steps", str(steps)]
  me = [sys.executable, os.path.abspath(__file__), "--worker=ours", f"--shape={shape}",
        f"--base_vocab={args.base_vocab}", f"--tiny_vocab={args.tiny_vocab}"] + common + (
            ["--pipelined"] if args.pipelined else [])
  if shape in REAL_DATA:
    me += [f"--vocab_model={args.vocab_model}", f"--multi30k_dir={args.multi30k_dir}",
           f"--packed_length={args.packed_length}"]
  out = []
  variants = ours_variants(args)
  for i, variant in enumerate(variants):
    dtype, xla, devices, accumulate, backend, flash = variant
    compiled = "jax jax.jit" if backend == "jax" else f"xla={'on' if xla else 'off'}"
    label = (f"t2tlite {dtype} {compiled}" +
             (f" {devices} devices" if devices != 1 else "") +
             (f" accumulate {accumulate}" if accumulate != 1 else "") +
             (" flash attention" if flash else ""))
    out.append((variant_key(i, variant, variants[0]), label, me + [
        f"--backend={backend}", f"--dtype={dtype}", f"--xla={xla}", f"--devices={devices}",
        f"--accumulate={accumulate}", f"--flash_attention={flash}"], {"KERAS_BACKEND": backend}))
  if shape in REAL_DATA:  # Ours only: the peers train on random ids.
    return out
  amps = [x for x in args.torch_amp.split(",") if x] if args.torch_python else []
  for i, amp in enumerate(amps):
    compiled = " torch.compile" if args.torch_compile else ""
    out.append(("torch" if i == 0 else f"torch_{amp}",
                f"torch.nn.Transformer amp={amp}{compiled} {args.torch_device}", [
        args.torch_python, TORCH_PEER, "--d_model", str(hp.d_model),
        "--num_heads", str(hp.num_heads), "--d_ff", str(hp.d_ff),
        "--num_encoder_layers", str(hp.num_encoder_layers),
        "--num_decoder_layers", str(hp.num_decoder_layers), "--vocab_size", str(V),
        "--dropout", str(hp.dropout), "--attention_dropout", str(hp.attention_dropout),
        "--relu_dropout", str(hp.relu_dropout), "--attn_bias", str(int(hp.attention_use_bias)),
        "--label_smoothing", str(hp.label_smoothing), "--threads", str(args.torch_threads),
        "--amp", amp, "--device", args.torch_device,
        "--compile", str(int(args.torch_compile))] + common, None))
  if args.tfm_python and shape == "base":
    for policy in [x for x in args.tfm_policies.split(",") if x]:
      out.append((f"tfm_{policy}", f"Model Garden {policy}", [
          args.tfm_python, args.tfm_script, "--config", "base", "--mode", "train", "--jit", "0",
          "--policy", policy, "--norm_first", str(args.tfm_norm_first)] + common, None))
  if args.stock_keras_script and shape == "base" and case.src_len == case.tgt_len:
    # gpu_peers.py takes its batch from the environment and writes its result file itself.
    out.append(("keras_stock", "stock Keras 3 layers, JAX, mixed_bfloat16",
                [args.stock_keras_python, args.stock_keras_script, "keras_jax", os.devnull],
                {"B": str(case.batch), "S": str(case.src_len), "KERAS_BACKEND": "jax"}))
  return out


def median_or_none(xs):
  xs = [x for x in xs if x is not None]
  return statistics.median(xs) if xs else None


def describe_batch(case):
  if case.shape in REAL_DATA:
    return "the trainer's Multi30k train batches"
  return f"batch {case.batch} x src {case.src_len} x tgt {case.tgt_len}"


def case_flops(args, case):
  """Matmul FLOPs of one training step of `case` (the same formula for every system)."""
  return step_flops(hparams_for(args, case.shape), case.batch, case.src_len, case.tgt_len)


def main(args):
  run_cases = cases(args)
  scratch = None
  if any(c.shape in REAL_DATA for c in run_cases) and not args.vocab_model:
    import tempfile
    scratch = tempfile.mkdtemp(prefix="train_throughput_")
    args.vocab_model = learn_multi30k_vocabulary(args, scratch)
  plan = {c.name: systems_for(args, c) for c in run_cases}
  started = datetime.datetime.now().astimezone()
  print(f"train throughput, {started:%Y-%m-%d %H:%M %Z}; ours on {args.backend}; "
        f"machine: {machine_info()}")
  raw = {c.name: {key: [] for key, _, _, _ in plan[c.name]} for c in run_cases}
  labels = {c.name: {key: label for key, label, _, _ in plan[c.name]} for c in run_cases}
  for r in range(args.rounds):
    for c in run_cases:
      print(f"round {r + 1}/{args.rounds}, {c.name} ({describe_batch(c)}):")
      for key, label, cmd, env in plan[c.name]:
        raw[c.name][key].append(run_subprocess(label, cmd, args, env))

  if scratch:
    import shutil
    shutil.rmtree(scratch, ignore_errors=True)
  summary = {}
  for c in run_cases:
    s = c.name
    tok = {k: [m.get("tgt_tok_per_s") for m in v] for k, v in raw[s].items()}
    other = {k: [m.get("foreign_cores_during") for m in v] for k, v in raw[s].items()}
    # Batches of many shapes (the Multi30k cases): the worker summed their FLOPs itself.
    flops = None if c.shape in REAL_DATA else case_flops(args, c)
    sysm = {}
    for k, v in tok.items():
      med = median_or_none(v)
      if flops is None:
        tflops = median_or_none([m.get("achieved_gflops") for m in raw[s][k]])
        tflops = None if tflops is None else tflops / 1e3
      else:
        tflops = None if med is None else med * flops / (c.batch * c.tgt_len) / 1e12
      sysm[k] = dict(label=labels[s][k], median_tgt_tok_per_s=med, per_round=v,
                     foreign_cores_per_round=other[k], tflops=tflops)
      piped = median_or_none([m.get("pipelined_tgt_tok_per_s") for m in raw[s][k]])
      if piped is not None:
        sysm[k]["pipelined_tgt_tok_per_s"] = piped
        if args.peak_tflops and flops is not None:
          sysm[k]["pipelined_mfu"] = piped * flops / (c.batch * c.tgt_len) / 1e12 / args.peak_tflops
      if args.peak_tflops and tflops is not None:
        sysm[k]["mfu"] = tflops / args.peak_tflops
    ratios = {}  # each configuration of ours against every peer; the main one against all
    for o in [k for k in tok if k.startswith("ours")]:
      for k in tok:
        if k == o or (k.startswith("ours") and o != "ours"):
          continue
        per_round = [x / y if (x and y) else None for x, y in zip(tok[o], tok[k])]
        ratios[f"{o}/{k}"] = dict(per_round=per_round, median=median_or_none(per_round))
    summary[s] = dict(case=c._asdict(), systems=sysm, ratios=ratios, flops_per_step=flops)

  print()
  print(f"Training target tokens/s (ours on {args.backend}), median of {args.rounds} "
        f"interleaved rounds")
  for c in run_cases:
    s = c.name
    w, n = steps_for(args, c.shape)
    print(f"\n[{s}] {SHAPES[c.shape][0]}, vocab {vocab_for(args, c.shape)}, {describe_batch(c)}, "
          f"{w} warm-up + {n} timed steps")
    mfu_head = f" {'MFU':>6s}" if args.peak_tflops else ""
    print(f"  {'system':44s} {'tgt tok/s':>10s} {'TFLOP/s':>8s}{mfu_head}   per round   "
          f"(cores used by other processes)")
    for k, m in summary[s]["systems"].items():
      med = m["median_tgt_tok_per_s"]
      pr = ", ".join("-" if x is None else f"{x:.1f}" for x in m["per_round"])
      fo = ", ".join("-" if x is None else f"{x:.2f}" for x in m["foreign_cores_per_round"])
      tf_s = "-" if m["tflops"] is None else f"{m['tflops']:.3f}"
      mfu = (f" {m['mfu']:6.1%}" if "mfu" in m else f" {'-':>6s}") if args.peak_tflops else ""
      print(f"  {m['label']:44s} {'-' if med is None else f'{med:.1f}':>10s} {tf_s:>8s}{mfu}"
            f"   [{pr}]   ({fo})")
      if "pipelined_tgt_tok_per_s" in m:
        mfu = f", {m['pipelined_mfu']:.1%} MFU" if "pipelined_mfu" in m else ""
        print(f"    pipelined (steps back to back, one host sync): "
              f"{m['pipelined_tgt_tok_per_s']:.1f} tgt tok/s{mfu}")
      contended = max([x for x in m["foreign_cores_per_round"] if x is not None] or [0.0])
      if contended > 0.3:
        print(f"    ^ WARNING: other processes used up to {contended:.2f} of "
              f"{os.cpu_count()} cores during these measurements")
    for k, rt in summary[s]["ratios"].items():
      med = rt["median"]
      pr = ", ".join("-" if x is None else f"{x:.3f}" for x in rt["per_round"])
      print(f"  ratio {k:38s} {'-' if med is None else f'{med:.3f}':>10s}   [{pr}]")

  if "multi30k" in raw and "multi30k_packed" in raw:
    tok = {s: [m.get("tgt_tok_per_s") for m in raw[s]["ours"]] for s in REAL_DATA}
    eff = {s: [m.get("target_efficiency") for m in raw[s]["ours"]] for s in REAL_DATA}
    per_round = [x / y if (x and y) else None for x, y in zip(tok["multi30k_packed"],
                                                              tok["multi30k"])]
    summary["packed_over_bucketed"] = dict(per_round=per_round, median=median_or_none(per_round))
    med = median_or_none(per_round)
    print(f"\n  real target tok/s, packed / bucketed: {'-' if med is None else f'{med:.3f}'}   "
          f"[{', '.join('-' if x is None else f'{x:.3f}' for x in per_round)}]; target padding "
          f"efficiency (real / all target positions of the timed batches) bucketed "
          f"{median_or_none(eff['multi30k']) or 0:.3f}, packed "
          f"{median_or_none(eff['multi30k_packed']) or 0:.3f}")

  if args.output_json:
    flags = {k: v for k, v in vars(args).items() if k not in ("worker", "shape")}
    with open(args.output_json, "w") as f:
      json.dump(dict(started=started.isoformat(),
                     finished=datetime.datetime.now().astimezone().isoformat(),
                     machine=machine_info(), flags=flags, summary=summary, raw=raw), f, indent=1)
    print(f"\nwrote {args.output_json}")


if __name__ == "__main__":
  ARGS = parse_args()
  # Keras reads its backend once, at first import: set it before anything imports keras (a
  # worker gets its own in its environment too). The driver needs keras for the hparams only.
  os.environ["KERAS_BACKEND"] = backends_of(ARGS)[0]
  if ARGS.worker == "ours":
    print(json.dumps(dict(run_ours(ARGS), peak_rss_mb=peak_rss_mb())))
  else:
    main(ARGS)
