"""Scale-out: several replicas and accumulated micro-batches equal one device's big batch.

The reference is always the plain one-device step on the whole global batch.
Batches have very different real-token counts per replica and per micro-batch,
so normalising the loss anywhere but by the global count would show; Adam's
first and second moments expose the gradient itself (Adam's update is
nearly blind to the gradient's scale, so a doubled gradient hides in the
weights but not in the moments).
"""

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2tlite.hparams_record import HParamsError
from t2tlite.models.transformer import Transformer
from t2tlite.training import (checkpoints, distribution, input_pipeline, losses, run_dir,
                              train_step)
from t2tlite.training.optimization import make_optimizer
from tests.helpers import (TINY, TINY_SHAPE, command, one_line_error, run as cli_run,
                           scalar_events, tiny_hparams)

# Constant learning rate (the Noam rate in the first steps is ~0); clipping active
# (norms are ~1-3), so clipping by the global norm is part of what must match.
EXACT = dict(num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
             learning_rate_schedule="constant", learning_rate_constant=3e-3,
             clip_grad_norm=0.5, xla=False)
# Real target tokens per row: replica 0's rows are long, replica 1's short, and every
# block of two rows (one micro-batch when accumulating 2) has its own count.
TARGET_LENGTHS = [6, 5, 6, 2, 1, 3, 1, 1]


def global_batches(count, seed=0, lengths=TARGET_LENGTHS, width=6, vocab=20):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(count):
    inputs = rng.integers(2, vocab, (len(lengths), width))
    targets = rng.integers(2, vocab, (len(lengths), width))
    for row, n in enumerate(lengths):
      targets[row, n:] = 0
      inputs[row, rng.integers(2, width + 1):] = 0
    out.append({"inputs": tf.constant(inputs, tf.int32),
                "targets": tf.constant(targets, tf.int32)})
  return out


def two_devices():
  return distribution.make_strategy(cpu_devices=2)


def build(hp, strategy=None, seed=3):
  strategy = strategy or tf.distribute.get_strategy()
  keras.utils.set_random_seed(seed)
  with strategy.scope():
    model = Transformer(hp)
    optimizer = make_optimizer(hp)
    optimizer.build(model.trainable_variables)
  distribution.decorrelate_dropout(model, strategy)
  return model, optimizer, train_step.make_train_step(model, optimizer, hp, strategy)


def run(hp, strategy=None, steps=3):
  model, optimizer, step = build(hp, strategy)
  metrics = [{k: float(v) for k, v in step(b).items()} for b in global_batches(steps)]
  return dict(metrics=metrics, weights=[w.numpy() for w in model.trainable_weights],
              moments=[v.numpy() for v in optimizer.variables
                       if "momentum" in v.path or "velocity" in v.path],
              iterations=int(optimizer.iterations.numpy()),
              learning_rate=float(tf.convert_to_tensor(optimizer.learning_rate)))


@pytest.fixture(scope="module")
def one_device():
  return run(tiny_hparams(**EXACT))


@pytest.mark.parametrize("replicas,accumulate,xla,xla_loss", [
    (2, 1, False, True),  # MirroredStrategy over 2 logical CPUs.
    (1, 2, True, True),  # Gradient accumulation inside the XLA-compiled step.
    (2, 2, True, True),  # Both: 4 micro-batches of 2 rows.
    (1, 1, False, False),  # No XLA at all: the reference's loss is compiled alone (xla_loss).
])
def test_replicas_and_accumulation_match_one_device_big_batch(one_device, replicas, accumulate,
                                                              xla, xla_loss):
  hp = tiny_hparams(**dict(EXACT, accumulate_steps=accumulate, xla=xla, xla_loss=xla_loss))
  got = run(hp, two_devices() if replicas == 2 else None)
  for mine, ref in zip(got["metrics"], one_device["metrics"]):
    for key in ("loss", "nll", "tokens", "correct", "grad_norm"):
      np.testing.assert_allclose(mine[key], ref[key], rtol=2e-5, err_msg=key)
  for mine, ref in zip(got["moments"], one_device["moments"]):
    # Summation order differs (replicas, micro-batches, XLA): entries that nearly
    # cancel differ by float32 rounding of the tensor's largest terms.
    np.testing.assert_allclose(mine, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
  for mine, ref in zip(got["weights"], one_device["weights"]):
    # Adam moves a weight by ~lr x m / sqrt(v) per step; where the gradient is
    # ~0 that ratio amplifies rounding, so weights match to a small part of lr.
    np.testing.assert_allclose(mine, ref, rtol=0, atol=0.05 * EXACT["learning_rate_constant"])
  # The schedule counts optimizer updates, not micro-batches.
  assert got["iterations"] == one_device["iterations"] == 3


def test_replicas_take_batches_of_changing_shape_without_xla():
  """Bucketed batches change shape every step; without XLA the step is traced
  shape-relaxed (rows unknown from the second shape on), and the replicas must
  still split each batch as the one-device step sees it whole."""
  hp = tiny_hparams(**EXACT)
  shapes = [global_batches(1, seed=1)[0],  # 8 rows x 6
            global_batches(1, seed=2, lengths=[7, 2, 9, 4], width=9)[0],  # 4 x 9
            global_batches(1, seed=3, lengths=[3, 1, 2, 2, 5, 1], width=5)[0]]  # 6 x 5
  metrics = {}
  for name, strategy in (("one", None), ("two", two_devices())):
    _, _, step = build(hp, strategy)
    metrics[name] = [{k: float(v) for k, v in step(b).items()} for b in shapes]
    assert train_step.compilations(step) == 2  # The second shape relaxed [rows, length].
  for mine, ref in zip(metrics["two"], metrics["one"]):
    for key in ("loss", "nll", "tokens", "correct", "grad_norm"):
      np.testing.assert_allclose(mine[key], ref[key], rtol=2e-5, err_msg=key)


def test_each_replica_draws_its_own_dropout_masks():
  hp = tiny_hparams(num_encoder_layers=1, num_decoder_layers=1, dropout=0.5)
  strategy = two_devices()
  keras.utils.set_random_seed(3)
  with strategy.scope():
    model = Transformer(hp)
  half = global_batches(1, lengths=[6, 4])[0]
  same_halves = {k: tf.concat([v, v], 0) for k, v in half.items()}  # Replica 1 gets replica 0's rows.

  @tf.function
  def logits_per_replica():
    shares = distribution.split_batch(strategy, same_halves)
    return strategy.experimental_local_results(
        strategy.run(lambda b: model(b, training=True), args=(shares,)))

  before = logits_per_replica()
  np.testing.assert_array_equal(before[0], before[1])  # Mirrored RNG state: the same masks.
  distribution.decorrelate_dropout(model, strategy)
  after = logits_per_replica()
  assert np.abs(after[0].numpy() - after[1].numpy()).max() > 1e-2


def overfit_losses(dtype, steps=40):
  """Per-token training loss over `steps` updates on one fixed copy batch."""
  hp = tiny_hparams(**dict(EXACT, dtype=dtype, clip_grad_norm=0.0))
  _, optimizer, step = build(hp)
  batch = global_batches(1, seed=5)[0]
  batch = dict(batch, inputs=batch["targets"])  # Copy the (padded) targets.
  out = []
  for _ in range(steps):
    metrics = step(batch)
    out.append(float(metrics["loss"]) / float(metrics["tokens"]))
  return np.array(out), optimizer


@pytest.fixture(scope="module")
def float32_losses():
  return overfit_losses("float32")[0]


@pytest.mark.parametrize("dtype", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_training_reaches_the_float32_loss(float32_losses, dtype):
  got, optimizer = overfit_losses(dtype)
  assert float32_losses[-1] < 0.25 * float32_losses[0]  # It learned: 3.6 -> 0.7 nats.
  np.testing.assert_allclose(got, float32_losses, atol=0.03)  # Measured: within 0.005.
  assert int(optimizer.iterations.numpy()) == len(got)  # No update was skipped.
  assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer) == (dtype == "mixed_float16")


def test_float16_loss_scaling_skips_a_non_finite_update_and_halves_the_scale():
  hp = tiny_hparams(**dict(EXACT, dtype="mixed_float16"))
  model, optimizer, step = build(hp)
  _, _, reference = build(tiny_hparams(**EXACT))  # float32, same initial weights.
  batch = global_batches(1)[0]
  before = [w.numpy() for w in model.trainable_weights]
  optimizer.dynamic_scale.assign(1e38)  # Scaled float16 gradients overflow to inf.
  metrics = step(batch)
  assert not np.isfinite(float(metrics["grad_norm"]))
  assert int(optimizer.iterations.numpy()) == 0  # Skipped: the schedule does not advance...
  for a, b in zip(model.trainable_weights, before):
    np.testing.assert_array_equal(a.numpy(), b)  # ...and no weight moved.
  np.testing.assert_allclose(float(optimizer.dynamic_scale.numpy()), 5e37, rtol=1e-6)
  optimizer.dynamic_scale.assign(2.0 ** 15)
  metrics = step(batch)
  assert int(optimizer.iterations.numpy()) == 1
  # The reported norm is the unscaled gradient's (float16 compute: ~1e-3 off float32's).
  np.testing.assert_allclose(float(metrics["grad_norm"]), float(reference(batch)["grad_norm"]),
                             rtol=2e-2)


def test_softmax_layer_norm_and_loss_stay_float32_under_mixed_bfloat16():
  hp = tiny_hparams(num_encoder_layers=1, num_decoder_layers=1, dtype="mixed_bfloat16",
                    xla=False)
  model = Transformer(hp)

  @tf.function
  def loss(batch):
    return losses.token_loss_sums(model(batch, training=False), batch["targets"], 0.1).loss

  ops = loss.get_concrete_function(global_batches(1)[0]).graph.get_operations()

  def dtype(op):
    return op.get_attr("T").name if "T" in op.node_def.attr else None

  softmax = [dtype(op) for op in ops if op.type == "Softmax"]
  assert softmax == ["float32"] * 3  # Encoder self-, decoder self- and cross-attention.
  # The loss's logsumexp over the vocabulary (the graph's only Exp and Log).
  assert [dtype(op) for op in ops if op.type in ("Exp", "Log")] == ["float32", "float32"]
  norm_math = [op for op in ops if "_norm" in op.name and op.type in (
      "Mean", "SquaredDifference", "Rsqrt", "Mul", "AddV2", "Sub")]
  # One per layer norm: 2 in the encoder layer, 3 in the decoder layer (post-norm).
  assert sum(op.type == "Rsqrt" for op in norm_math) == 5
  assert {dtype(op) for op in norm_math} == {"float32"}
  assert {dtype(op) for op in ops if op.type == "MatMul"} == {"bfloat16"}  # The rest is bf16.


XLA_SCRIPT = """
import numpy as np, tensorflow as tf
from t2tlite import registry
from t2tlite.models.transformer import Transformer
from t2tlite.training import train_step
from t2tlite.training.optimization import make_optimizer
TINY_SHAPE = %r
hp = registry.hparams("transformer_tiny").replace(
    **TINY_SHAPE, num_encoder_layers=1, num_decoder_layers=1,
    input_vocab_size=20, target_vocab_size=20, accumulate_steps=2, xla=True)
step = train_step.make_train_step(Transformer(hp), make_optimizer(hp), hp)
rng = np.random.default_rng(0)
for rows, length in [(8, 4), (4, 8), (8, 4), (4, 8), (8, 4)]:  # Two bucket shapes, 5 steps.
  step({k: tf.constant(rng.integers(2, 20, (rows, length)), tf.int32)
        for k in ("inputs", "targets")})
print("compilations", train_step.compilations(step))
"""


def test_xla_compiles_the_train_step_once_per_bucket_shape(tmp_path):
  """XLA's own dump of the HLO modules it compiled is the independent count."""
  dump = tmp_path / "xla"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_module_re=whole_step")
  proc = subprocess.run([sys.executable, "-c", XLA_SCRIPT % (TINY_SHAPE,)], capture_output=True,
                        text=True, env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  modules = {name.split(".")[0] for name in os.listdir(dump)
             if "whole_step" in name and "before_optimizations" in name}
  assert len(modules) == 2  # Not 5 (steps), not 1 (it did compile each shape).
  assert "compilations 2" in proc.stdout  # What the trainer logs.


def test_without_xla_a_step_traced_for_any_shape_first_traces_once():
  """Graph building is all a per-shape trace buys without XLA (~10 s each for 4+4 layers):
  traced for any shape before its first call, as the trainer does for bucketed batches, the
  step traces once over every shape (left alone it relaxes only at the second shape: two
  traces, test_replicas_take_batches_of_changing_shape_without_xla)."""
  hp = tiny_hparams(num_encoder_layers=1, num_decoder_layers=1, xla=False)
  model = Transformer(hp)
  step = train_step.make_train_step(model, make_optimizer(hp), hp)
  evaluate = train_step.make_eval_step(model, hp)
  rng = np.random.default_rng(0)
  for rows, length in [(8, 4), (4, 8), (6, 5), (2, 16), (8, 4)]:
    batch = {k: tf.constant(rng.integers(2, 20, (rows, length)), tf.int32)
             for k in ("inputs", "targets")}
    if not train_step.compilations(step):
      train_step.trace_for_any_shape(step, batch)
      train_step.trace_for_any_shape(evaluate, batch)
    sums = step(batch)
    assert float(sums["tokens"]) == rows * length  # No padding in these rows.
    assert np.isfinite(float(sums["loss"])) and np.isfinite(float(evaluate(batch)["loss"]))
  assert train_step.compilations(step) == 1 == train_step.compilations(evaluate)


@pytest.mark.parametrize("replicas,xla_loss", [(1, False), (1, True), (2, True)])
def test_dev_sums_are_the_same_without_the_filler_rows(replicas, xla_loss):
  """Trimmed dev batches (TensorFlow without XLA) score dev exactly as one device's full-row
  batches; with two replicas each partial batch keeps an even number of rows to split."""
  hp = tiny_hparams(num_encoder_layers=1, num_decoder_layers=1, xla=False, max_length=24,
                    batch_size=96, xla_loss=xla_loss)
  rng = np.random.default_rng(4)
  pairs = []
  for _ in range(40):
    source, target = rng.integers(3, 20), rng.integers(3, 20)
    pairs.append({"inputs": np.append(rng.integers(2, hp.input_vocab_size, source - 1), 1),
                  "targets": np.append(rng.integers(2, hp.target_vocab_size, target - 1), 1)})
  data = tf.data.Dataset.from_generator(lambda: iter(pairs), output_signature={
      k: tf.TensorSpec([None], tf.int64) for k in ("inputs", "targets")}).map(
          lambda ex: {k: tf.cast(v, tf.int32) for k, v in ex.items()})

  def sums(strategy, static_shapes, rows_multiple):
    model, _, _ = build(hp, strategy)  # Same seed: the same weights on one or two devices.
    evaluate = train_step.make_eval_step(model, hp, strategy)
    total = collections.Counter()
    for batch in input_pipeline.evaluation_dataset(data, hp, replicas=rows_multiple,
                                                   static_shapes=static_shapes):
      assert batch["targets"].shape[0] % rows_multiple == 0
      total.update({k: float(v) for k, v in evaluate(batch).items()})
    return total

  full = sums(None, True, 1)
  trimmed = sums(two_devices() if replicas == 2 else None, False, replicas)
  assert full["sequences"] == trimmed["sequences"] == 40
  for key in train_step.METRIC_KEYS:
    assert trimmed[key] == pytest.approx(full[key], rel=1e-5), key


def test_global_batches_hold_replicas_times_micro_batches_of_one_bucket():
  hp = tiny_hparams(batch_size=64, max_length=32, accumulate_steps=3, shuffle_buffer_size=50)
  rng = np.random.default_rng(0)
  pairs = [{"inputs": rng.integers(2, 20, n).astype(np.int32),
            "targets": rng.integers(2, 20, n).astype(np.int32)}
           for n in rng.integers(2, 32, 300)]
  data = tf.data.Dataset.from_generator(lambda: iter(pairs), output_signature={
      k: tf.TensorSpec([None], tf.int32) for k in ("inputs", "targets")})
  boundaries = input_pipeline.bucket_boundaries(32, hp.min_length_bucket, hp.length_bucket_step)
  per_device = dict(zip(boundaries, input_pipeline.bucket_batch_sizes(boundaries, 64)))
  for batch in input_pipeline.training_dataset(data, hp, seed=1, replicas=2).take(20):
    rows, length = batch["targets"].shape
    assert rows == 2 * 3 * per_device[length]  # replicas x accumulate_steps x (64 // L) rows.
    assert batch["inputs"].shape == (rows, length)


@pytest.mark.parametrize("hosts,index,message", [
    ("127.0.0.1:2222,localhost", 0, "--worker_hosts: 'localhost' is not host:port"),
    ("a:1,b:2", 2, "--task_index=2 must be in [0, 2)"),
    ("a:1,a:1", 0, "names a worker twice"),
])
def test_bad_cluster_flags_are_named(hosts, index, message):
  with pytest.raises(distribution.DistributionError, match=re.escape(message)):
    distribution.cluster_config(hosts, index)


def test_cluster_config_is_tensorflow_s_tf_config():
  config = distribution.cluster_config("10.0.0.1:2222, 10.0.0.2:2222", 1)
  resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(config)}):
    assert resolver.cluster_spec().as_dict() == {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)


@pytest.mark.parametrize("env,kwargs,message", [
    ({"TF_CONFIG": "{not json"}, {}, "TF_CONFIG: not valid JSON"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}'},
     {}, "TF_CONFIG: task"),
    ({"TF_CONFIG": '{"cluster": {}}'}, {"worker_hosts": "a:1"}, "--worker_hosts and TF_CONFIG"),
    ({}, {"num_gpus": 1}, "--num_gpus=1: only 0 GPUs are visible"),
    ({}, {"gpu_ids": "x"}, "--gpu_ids='x'"),
])
def test_bad_device_settings_are_one_line_errors(env, kwargs, message):
  with mock.patch.dict(os.environ, env):
    with pytest.raises(distribution.DistributionError, match=re.escape(message)):
      distribution.make_strategy(**kwargs)


def test_accumulate_steps_is_validated():
  with pytest.raises(HParamsError, match="accumulate_steps=0 must be positive"):
    tiny_hparams(accumulate_steps=0)


def test_trainer_reports_a_bad_worker_flag_in_one_line(tmp_path):
  proc = cli_run("t2t-trainer", "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
                 f"--output_dir={tmp_path}", "--worker_hosts=127.0.0.1", check=False)
  one_line_error(proc, "--worker_hosts: '127.0.0.1' is not host:port")


def free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def start_workers(tmp_path, out, hosts, flags, hparams=""):
  """Both workers of one cluster training into `out`; returns them and their stderr files."""
  procs, logs = [], []
  for index in range(2):
    worker_tmp = tmp_path / f"tmp{index}"  # Where a worker's throwaway checkpoints go.
    worker_tmp.mkdir(exist_ok=True)
    log = tmp_path / f"worker{index}.{len(list(tmp_path.glob(f'worker{index}.*')))}.log"
    with open(log, "w") as stderr:
      procs.append(subprocess.Popen(command("t2t-trainer") + [
          "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
          f"{TINY},xla=false,min_length_bucket=32{hparams}", f"--output_dir={out}",
          "--eval_steps=1", "--noeval_decode", f"--worker_hosts={hosts}",
          f"--task_index={index}"] + flags,
          stdout=subprocess.DEVNULL, stderr=stderr,
          env=dict(os.environ, TMPDIR=str(worker_tmp), TF_CPP_MIN_LOG_LEVEL="2")))
    logs.append(log)
  return procs, logs


def finished_logs(procs, logs):
  for p in procs:
    p.wait(timeout=600)
  return [p.returncode for p in procs], [log.read_text() for log in logs]


@pytest.mark.slow
def test_two_workers_train_in_sync_resume_and_the_chief_checkpoint_decodes(tmp_path):
  out = tmp_path / "run"
  hosts = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))

  def train(steps):
    """Both workers of one cluster to `steps`; returns their stderr logs."""
    codes, logs = finished_logs(*start_workers(tmp_path, out, hosts, [
        f"--train_steps={steps}", "--save_checkpoints_steps=2", "--log_every=2",
        "--eval_every=0"]))
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    return logs

  def checksums(logs, step):
    return [re.search(rf"step {step}: weights checksum (\w+)", log).group(1) for log in logs]

  first = train(4)
  assert "tokens per update = 512 per device x 2 devices x 1 accumulate_steps = 1024" in first[0]
  assert "CollectiveAllReduceStrategy: 2 replicas in sync, worker 0 (chief)" in first[0]
  sums = checksums(first, 4)
  assert sums[0] == sums[1]  # One model: the all-reduced update on both workers.
  for log in first:  # xla=false: bucketed batches, one trace for any shape.
    traces = re.findall(r"train step trace #(\d+): .* \(xla=false: traced once, for any", log)
    assert traces == ["1"]
  # Only the chief writes: its checkpoints and one events file; worker 1 kept nothing.
  assert os.path.exists(out / "ckpt-4.index") and "saved checkpoint" not in first[1]
  assert len(list(out.glob("events.out.tfevents.*"))) == 1
  assert not os.listdir(tmp_path / "tmp1")

  second = train(6)
  for log in second:  # Both workers restore the chief's checkpoint.
    assert f"restored {out}/ckpt-4: resuming at step 4" in log
  sums = checksums(second, 6)
  assert sums[0] == sums[1]
  model, path = run_dir.load_model(str(out))
  assert path.endswith("ckpt-6") and checkpoints.weights_checksum(model) == sums[0]

  sources = tmp_path / "sources.txt"
  sources.write_text("3 1 4 1 5\n9 2 6\n")
  decoded = tmp_path / "decoded.txt"
  cli_run("t2t-decoder", "--problem=algorithmic_copy", f"--output_dir={out}",
          f"--decode_from_file={sources}", f"--decode_to_file={decoded}",
          "--decode_hparams=beam_size=2")
  assert len(decoded.read_text().splitlines()) == 2


def test_a_signal_to_one_worker_stops_both_after_the_same_step_and_the_chiefs_clock_too(
    tmp_path):
  """SIGTERM to worker 1 alone: both end after one step, saved (exit 143, as one process);
  resumed with --train_seconds, the chief's clock ends both after one later step."""
  out = tmp_path / "run"
  hosts = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
  flags = ["--train_steps=100000", "--save_checkpoints_steps=100000", "--log_every=1",
           "--eval_every=0"]
  procs, logs = start_workers(tmp_path, out, hosts, flags)
  deadline = time.time() + 300
  while "step 2/100000" not in logs[1].read_text():
    assert time.time() < deadline and procs[1].poll() is None, logs[1].read_text()[-3000:]
    time.sleep(0.2)
  procs[1].send_signal(signal.SIGTERM)
  codes, texts = finished_logs(procs, logs)
  assert codes == [143, 143], texts[0][-3000:] + texts[1][-3000:]
  stopped = [re.search(r"stopped by SIGTERM at step (\d+)", text).group(1) for text in texts]
  step = int(stopped[0])
  assert stopped[1] == stopped[0] and step >= 2
  assert f"saved checkpoint {out}/ckpt-{step}" in texts[0]
  seconds = tf.train.load_variable(str(out / f"ckpt-{step}"),
                                   "seconds_trained/.ATTRIBUTES/VARIABLE_VALUE")

  procs, logs = start_workers(tmp_path, out, hosts,
                              flags + [f"--train_seconds={int(seconds) + 4}"])
  codes, texts = finished_logs(procs, logs)
  assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
  for text in texts:
    assert f"restored {out}/ckpt-{step}: resuming at step {step}" in text
  end = int(re.search(r"--train_seconds=\d+ reached at step (\d+)", texts[0]).group(1))
  sums = [re.search(rf"step {end}: weights checksum (\w+)", text).group(1) for text in texts]
  assert end > step and sums[0] == sums[1]
  model, path = run_dir.load_model(str(out))
  assert path.endswith(f"ckpt-{end}") and checkpoints.weights_checksum(model) == sums[0]


# Slow-marked (six two-worker processes, the suite's costliest test): CI trains, stops and
# resumes two workers in the signal test above; this rerun/resume agreement runs under -m slow.
@pytest.mark.slow
def test_two_workers_agree_on_what_is_left_to_evaluate_when_rerun_and_resumed(tmp_path):
  """Only the chief read its events, so a rerun of a finished run sent worker 1 alone into
  dev's collective pass (a traceback, exit 1). Now both see step 4's evaluation as done;
  with the eval events gone (a kill during step 4's evaluation), both evaluate it first."""
  import shutil
  out = tmp_path / "run"
  hosts = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
  flags = ["--save_checkpoints_steps=2", "--log_every=2", "--eval_every=2"]
  for rerun in (False, True):
    codes, texts = finished_logs(*start_workers(tmp_path, out, hosts,
                                                flags + ["--train_steps=4"]))
    assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
  for text in texts:
    assert "step 4 >= --train_steps=4: nothing to train; the evaluation at step 4" in text
  shutil.rmtree(out / "eval")
  codes, texts = finished_logs(*start_workers(tmp_path, out, hosts,
                                              flags + ["--train_steps=6"]))
  assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
  for text in texts:
    assert "step 4: its dev evaluation did not finish before the run stopped" in text
  sums = [re.search(r"step 6: weights checksum (\w+)", text).group(1) for text in texts]
  assert sums[0] == sums[1]
  assert [step for step, _ in scalar_events(out / "eval", "loss")] == [4, 6]


@pytest.mark.slow
def test_the_chiefs_early_stopping_stops_both_workers_after_the_same_step(tmp_path):
  """--keep_best with --worker_hosts (refused before): at a learning rate of 0 dev's loss never
  improves on step 2's, so patience 1 runs out at step 4's evaluation, on both workers."""
  out = tmp_path / "run"
  hosts = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
  codes, texts = finished_logs(*start_workers(
      tmp_path, out, hosts, ["--train_steps=100000", "--save_checkpoints_steps=2",
                             "--eval_every=2", "--keep_best=loss", "--early_stopping_patience=1"],
      ",learning_rate_schedule=constant,learning_rate_constant=0.0"))
  assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
  assert "early stopping: dev loss has not improved for 1 evaluations" in texts[0]
  assert "early stopping on the chief's dev evaluation; stopped at step 4 of 100000" in texts[1]
  sums = [re.search(r"step 4: weights checksum (\w+)", text).group(1) for text in texts]
  assert sums[0] == sums[1]
  best = json.loads((out / "best" / "best.json").read_text())
  assert best["step"] == 2 and best["evaluations_since_best"] == 1
  model, _ = run_dir.load_model(str(out), str(out / "best" / "ckpt-2"))
  assert checkpoints.weights_checksum(model) == sums[0]  # A rate of 0: the same weights.
