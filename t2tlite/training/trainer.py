"""The training loop behind `t2t-trainer`.

Builds the model and optimizer under a tf.distribute strategy scope (one
device, MirroredStrategy, or MultiWorkerMirroredStrategy; see
distribution.py), restores the latest checkpoint if the output directory has
one (model, optimizer and the input iterator, so a run killed with `kill -9`
continues on the same step with the same data), then alternates training
steps, progress lines on stderr, TensorBoard summaries, periodic evaluation
and checkpoints. With several workers only the chief writes into the output
directory, and every worker restores the chief's checkpoint.
"""

import dataclasses
import json
import os
import time
from typing import Optional

import keras
import tensorflow as tf
from absl import logging

from t2tlite import registry
from t2tlite.hparams.hparams import HParams
from t2tlite.training import (averaging, checkpoints, distribution, input_pipeline, progress,
                              run_dir, train_step)
from t2tlite.training.optimization import make_optimizer


@dataclasses.dataclass
class TrainOptions:
  """Loop settings that do not change the model (the t2t-trainer flags)."""
  train_steps: int = 1000  # Stop when the optimizer has made this many updates.
  eval_every: int = 1000  # Evaluate on dev every N steps (0: only at the end).
  eval_steps: int = 0  # Dev batches per evaluation (0: the whole dev set).
  save_checkpoints_steps: int = 1000  # Checkpoint every N steps...
  save_checkpoints_secs: int = 600  # ...or every N seconds, whichever comes first (paper: 10 min).
  keep_checkpoint_max: int = 20  # Checkpoints kept (20 covers the big model's averaging).
  log_every: int = 100  # Steps between progress lines and train summaries.
  random_seed: int = 1  # Seeds initialisation, dropout and shuffling.
  eval_decode: bool = True  # At each evaluation also decode dev for real and log BLEU (or exact match).
  eval_decode_lines: int = 0  # Dev sentences decoded per evaluation (0: all).
  eval_decode_hparams: str = ""  # --decode_hparams for those decodes (default: the problem's, beam 4).
  average_last_n: int = 0  # Average the last N checkpoints at the end of training (0: off).
  train_seconds: int = 0  # Also stop once training has taken this long, resumes included (0: no limit).


class Trainer:
  """Trains `model_name` on `problem` with `hparams` into `output_dir`."""

  def __init__(self, problem, hparams: HParams, output_dir: str, data_dir: Optional[str] = None,
               options: TrainOptions = TrainOptions(), model_name: str = "transformer",
               strategy: Optional[tf.distribute.Strategy] = None, run_info: Optional[dict] = None):
    input_vocab, target_vocab = problem.vocab_sizes(data_dir)
    self.hparams = hparams.replace(input_vocab_size=input_vocab, target_vocab_size=target_vocab)
    self.problem = problem
    self.output_dir = output_dir
    self.data_dir = data_dir
    self.options = options
    self.strategy = strategy or tf.distribute.get_strategy()
    self.replicas = self.strategy.num_replicas_in_sync
    self.is_chief = distribution.is_chief(self.strategy)
    if self.is_chief:
      run_dir.prepare(output_dir, self.hparams, dict(
          run_info or {}, problem=problem.name, model=model_name))
    keras.utils.set_random_seed(options.random_seed)  # The same seed on every worker.

    with self.strategy.scope():
      self.model = registry.model(model_name)(self.hparams)
      self.optimizer = make_optimizer(self.hparams)
      self.optimizer.build(self.model.trainable_variables)
    dropped = problem.count_longer_than(data_dir, "train", self.hparams.max_length)
    if dropped:
      logging.info("max_length=%d drops %d training pairs with a longer side (EOS included)",
                   self.hparams.max_length, dropped)
    train_examples = problem.dataset("train", data_dir)
    self.num_buckets = input_pipeline.num_buckets(train_examples, self.hparams)
    train_data = input_pipeline.training_dataset(
        train_examples, self.hparams, seed=options.random_seed, replicas=self.replicas)
    self.train_iterator = iter(train_data)  # Global batches; the step splits them.
    if options.train_seconds and isinstance(self.strategy,
                                            tf.distribute.MultiWorkerMirroredStrategy):
      raise distribution.DistributionError(
          "--train_seconds: workers could stop on different steps; bound the run with "
          "--train_steps when training on several machines")
    # Wall time spent training so far, resumes included (what --train_seconds bounds).
    self.seconds_trained = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                       name="seconds_trained")
    self.checkpoint = tf.train.Checkpoint(
        model=checkpoints.model_trackable(self.model), optimizer=self.optimizer,
        train_iterator=self.train_iterator, seconds_trained=self.seconds_trained)
    self.write_dir = distribution.checkpoint_write_dir(output_dir, self.strategy)
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self.write_dir,
        max_to_keep=options.keep_checkpoint_max if self.is_chief else 1,
        step_counter=self.optimizer.iterations)
    self._dev_decoder = None  # Built at the first evaluation that decodes.
    self.train_step = train_step.make_train_step(
        self.model, self.optimizer, self.hparams, self.strategy)
    self.eval_step = train_step.make_eval_step(self.model, self.hparams, self.strategy)
    if self.is_chief:
      self.train_writer = tf.summary.create_file_writer(output_dir)
      self.eval_writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    else:
      self.train_writer = self.eval_writer = tf.summary.create_noop_writer()
    self._compilations = {"train": 0, "eval": 0}  # Traces (XLA compilations) seen so far.

  @property
  def step(self) -> int:
    return int(self.optimizer.iterations.numpy())

  def restore(self) -> int:
    """Restores the latest checkpoint, if any; returns the step training resumes from.

    Every worker reads the chief's checkpoint, in --output_dir.
    """
    latest = tf.train.latest_checkpoint(self.output_dir)
    if latest:
      self.checkpoint.restore(latest).assert_existing_objects_matched()
      logging.info("restored %s: resuming at step %d", latest, self.step)
    else:
      logging.info("no checkpoint in %s: starting from step 0", self.output_dir)
    distribution.decorrelate_dropout(self.model, self.strategy)
    return self.step

  def save(self) -> str:
    """Saves on every worker (the documented pattern); only the chief's copy is kept."""
    self.seconds_trained.assign(self._seconds_trained())
    path = self.manager.save(checkpoint_number=self.step)
    if self.is_chief:
      logging.info("saved checkpoint %s", path)
    else:
      distribution.discard_write_dir(self.write_dir, self.output_dir)
    return path

  def train(self) -> dict:
    """Runs to `train_steps`; returns the last evaluation metrics."""
    opts = self.options
    step = self.restore()
    if step == 0:
      with self.train_writer.as_default(step=0):
        tf.summary.text("hparams", "```\n" + json.dumps(self.hparams.to_dict(), indent=2) + "\n```")
    hp = self.hparams
    logging.info("training %s on %s: %d parameters, steps %d -> %d, dtype %s, xla %s",
                 type(self.model).__name__, self.problem.name, self.model.count_params(),
                 step, opts.train_steps, hp.dtype, hp.xla)
    logging.info("%s", distribution.describe(self.strategy))
    logging.info("tokens per update = %d per device x %d devices x %d accumulate_steps = %d",
                 hp.batch_size, self.replicas, hp.accumulate_steps,
                 distribution.tokens_per_update(hp, self.replicas))
    window = progress.MetricWindow()
    last_save_time = time.time()
    last_eval = {}
    skipped = 0
    self._clock = (time.time(), float(self.seconds_trained.numpy()))
    if opts.train_seconds:
      logging.info("time budget: %s of %s used", progress.format_duration(self._seconds_trained()),
                   progress.format_duration(opts.train_seconds))
    while step < opts.train_steps and not self._out_of_time():
      batch = next(self.train_iterator)
      window.add(self.train_step(batch))
      self._log_compilation("train", self.train_step, batch)
      if self.step == step:  # mixed_float16: a non-finite gradient; the loss scale halved.
        skipped += 1
        logging.warning("step %d: non-finite gradients, update skipped (%d so far)", step + 1,
                        skipped)
        continue
      step = self.step
      if step % opts.log_every == 0 or step == opts.train_steps:
        self._log_train(step, window)
        window.reset()
      if opts.eval_every and step % opts.eval_every == 0 and step < opts.train_steps:
        last_eval = self.evaluate(step)
      due = (step % opts.save_checkpoints_steps == 0 or
             (opts.save_checkpoints_secs and
              time.time() - last_save_time >= opts.save_checkpoints_secs))
      if due and step < opts.train_steps:
        self.save()
        last_save_time = time.time()
    if self.manager.latest_checkpoint != os.path.join(self.write_dir, f"ckpt-{step}"):
      self.save()  # The final step, unless it was just saved.
    last_eval = self.evaluate(step)
    if opts.average_last_n and self.is_chief:
      self._average(step)
    logging.info("step %d: weights checksum %s", step, checkpoints.weights_checksum(self.model))
    distribution.barrier(self.strategy)
    return last_eval

  def _average(self, step: int) -> None:
    """Writes averaged/ckpt-<step>, keeping one already there (a rerun of a finished run)."""
    path = averaging.averaged_path(self.output_dir, step)
    if os.path.exists(path + ".index"):
      logging.info("%s exists: kept (t2t-avg-all --overwrite replaces it)", path)
      return
    averaging.average_checkpoints(self.output_dir, self.options.average_last_n)

  def decode_dev(self) -> dict:
    """Real (not teacher-forced) decoding of dev, scored with the problem's metrics."""
    from t2tlite.decoding.decode_hparams import DecodeHParams
    from t2tlite.decoding.decoder import Decoder
    from t2tlite.metrics import scoring
    if self._dev_decoder is None:
      decode_hparams = DecodeHParams().override(self.problem.default_decode_hparams).override(
          self.options.eval_decode_hparams, "--eval_decode_hparams")
      encoders = self.problem.encoders(self.data_dir)
      self._dev_decoder = Decoder(self.model, decode_hparams,
                                  self.problem.decode_constraint(decode_hparams, encoders))
      sources, references = self.problem.eval_text("dev", self.data_dir)
      if self.options.eval_decode_lines:
        sources = sources[:self.options.eval_decode_lines]
        references = references[:self.options.eval_decode_lines]
      self._dev_text = (sources, references, encoders["inputs"], encoders["targets"])
    sources, references, source_encoder, target_encoder = self._dev_text
    start = time.perf_counter()
    postprocess = self.problem.decode_postprocessor()
    decodes = self._dev_decoder.decode_lines(sources, source_encoder, target_encoder, postprocess)
    if hasattr(postprocess, "summary"):
      logging.info("dev decodes: %s", postprocess.summary())
    scores = scoring.score(decodes, references, self.problem.eval_metrics)
    logging.info("decoded %d dev sentences in %.1f s (%d batch shapes so far): %s", len(sources),
                 time.perf_counter() - start, len(self._dev_decoder.shapes_seen),
                 " ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    return scores

  def evaluate(self, step: Optional[int] = None) -> dict:
    """Teacher-forced loss, NLL, perplexity and accuracies on the dev split."""
    step = self.step if step is None else step
    if not self.problem.has_data("dev", self.data_dir):
      logging.warning("no dev data for %s in %s: evaluation skipped", self.problem.name,
                      self.data_dir)
      return {}
    data = input_pipeline.evaluation_dataset(
        self.problem.dataset("dev", self.data_dir), self.hparams, replicas=self.replicas)
    if self.options.eval_steps:
      data = data.take(self.options.eval_steps)
    window = progress.MetricWindow()
    for batch in data:
      window.add(self.eval_step(batch))
      self._log_compilation("eval", self.eval_step, batch)
    metrics = window.result()
    scalars = {k: metrics[k] for k in ("loss", "nll", "perplexity", "accuracy",
                                       "sequence_accuracy")}
    if self.options.eval_decode and self.is_chief:  # Decoding needs no other worker.
      scalars.update(self.decode_dev())
    progress.write_scalars(self.eval_writer, step, scalars)
    logging.info("eval step %d | %s", step, " ".join(f"{k} {v:.4f}" for k, v in scalars.items()))
    return scalars

  def _seconds_trained(self) -> float:
    """Training wall time so far: before this process (from the checkpoint) plus since its loop began."""
    started, before = getattr(self, "_clock", (time.time(), float(self.seconds_trained.numpy())))
    return before + time.time() - started

  def _out_of_time(self) -> bool:
    budget = self.options.train_seconds
    if not budget or self._seconds_trained() < budget:
      return False
    logging.info("--train_seconds=%d reached at step %d (%s of training)", budget, self.step,
                 progress.format_duration(self._seconds_trained()))
    return True

  def _log_train(self, step, window):
    metrics = window.result()
    learning_rate = float(tf.convert_to_tensor(self.optimizer.learning_rate))
    seconds_left = (self.options.train_seconds - self._seconds_trained()
                    if self.options.train_seconds else None)
    logging.info("%s", progress.progress_line(step, self.options.train_steps, metrics,
                                              learning_rate, window.steps, seconds_left))
    scalars = {k: metrics[k] for k in ("loss", "nll", "perplexity", "accuracy", "grad_norm")}
    scalars.update(learning_rate=learning_rate,
                   tokens_per_sec=metrics["tokens"] / max(metrics["seconds"], 1e-9),
                   xla_compilations=sum(self._compilations.values()))
    progress.write_scalars(self.train_writer, step, scalars)

  def _log_compilation(self, kind, step_fn, batch):
    """Logs each new trace of `step_fn` (with XLA: one compilation per bucket shape)."""
    count = train_step.compilations(step_fn)
    if count == self._compilations[kind]:
      return
    self._compilations[kind] = count
    if self.hparams.xla:
      bound = f" (at most {self.num_buckets} bucket shapes)" if kind == "train" else ""
    else:
      bound = " (xla=false: from the second trace on, any shape)"
    logging.info("%s step %s #%d: global batch shape %s%s", kind,
                 "XLA compilation" if self.hparams.xla else "trace", count,
                 batch["targets"].shape.as_list(), bound)
