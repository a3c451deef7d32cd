"""The training loop behind `t2t-trainer`.

Builds the model and optimizer under a tf.distribute strategy scope (one
device, MirroredStrategy, or MultiWorkerMirroredStrategy; see
distribution.py), restores the latest checkpoint if the output directory has
one (model, optimizer and the input iterator, so a run killed with `kill -9`
continues on the same step with the same data), then alternates training
steps, progress lines on stderr, TensorBoard summaries, periodic evaluation
and checkpoints. Ctrl-C or SIGTERM ends the loop after the step in flight
and saves that step (stop_signals.py). A step due both a checkpoint and an
evaluation is saved first, so a run stopped or killed while it evaluates dev
keeps the step; a signal during the evaluation abandons it between dev
batches (teacher-forced or decoded), and the resumed run evaluates that step
before training on. With several workers only the chief writes into the
output directory, every worker restores the chief's checkpoint, and a signal
to any worker, the chief's --train_seconds or its early stopping stops all of
them after the same step (an evaluation under way finishes first: every
worker takes part). A new run may start from another run's weights (warm_start.py);
the best evaluation's weights are kept in best/ and training may stop early
(keep_best.py).

Backends (`options.backend`, README "Backends"): under TensorFlow the step is
train_step.py's tf.function; under JAX it is jax_step.py's jax.jit of a pure
function over the variables, fed the same tf.data batches as numpy, and the
state goes back into the Keras variables before anything reads them (a
checkpoint, best/, the checksum). Everything else here is shared: the data,
the schedule of logs, evaluations and saves, the checkpoint files (written
by TensorFlow from numpy values, checkpoints.VariableMirror) and their
manifests. Where TensorFlow is not installed (JAX only), the batches come
from numpy files (training/numpy_batches.py), checkpoints are .npz
(npz_checkpoints.py) and scalars go to scalars.csv. Dev is decoded during
training under TensorFlow only (beam search is TensorFlow's), by the
`dev_decoding` the command hands the Trainer (decoding/dev_decoding.py).
"""

import json
import os
import time
from typing import Callable, Optional

import keras
from absl import logging

from t2tlite import backends, registry, xla_choice
from t2tlite.hparams_record import HParams
from t2tlite.data import shard_manifest
from t2tlite.training import (averaging, checkpoint_manifest, checkpoints, keep_best,
                              npz_checkpoints, numpy_batches, progress, resume, run_dir,
                              run_identity, run_lock, stop_signals, warm_start)
from t2tlite.training.optimization import make_optimizer
from t2tlite.training.options import DECODED_METRICS, TrainOptions, check_keep_best_backend

try:
  import tensorflow as tf
  from t2tlite.training import distribution, input_pipeline, train_step
except ImportError:  # JAX where TensorFlow is not installed: numpy batches, .npz checkpoints.
  tf = None


class Trainer:
  """Trains `model_name` on `problem` with `hparams` into `output_dir`."""

  def __init__(self, problem, hparams: HParams, output_dir: str, data_dir: Optional[str] = None,
               options: TrainOptions = TrainOptions(), model_name: str = "transformer",
               strategy=None, run_info: Optional[dict] = None,
               dev_decoding: Optional[Callable[[keras.Model], dict]] = None):
    """`problem` may be saved numpy batches (numpy_batches.SavedBatches) instead of a problem.

    `dev_decoding`: model -> decoded dev metrics (decoding.dev_decoding.DevDecoding, which
    t2t-trainer passes), called at each evaluation while `options.eval_decode`; without it
    dev is scored teacher-forced only. Under JAX it is not called (beam search is TensorFlow's).
    """
    self.backend = backends.select(options.backend)  # Keras is loaded: must be the one asked.
    self.jax = self.backend == backends.JAX
    input_vocab, target_vocab = problem.vocab_sizes(data_dir)
    self.hparams = hparams.replace(input_vocab_size=input_vocab, target_vocab_size=target_vocab)
    self.problem = problem
    self.saved_batches = problem if isinstance(problem, numpy_batches.SavedBatches) else None
    self.output_dir = output_dir
    self.data_dir = data_dir
    self.options = options
    self._check_backend_options(strategy)
    self.distribution = None  # keras.distribution.DataParallel under JAX with several devices.
    if self.jax:
      from t2tlite.training import jax_step
      self.strategy = None
      self.distribution = jax_step.data_parallel()  # Before the model: replicated variables.
      self.replicas = jax_step.device_count(self.distribution)
      self.is_chief = True
    else:
      self.strategy = strategy or tf.distribute.get_strategy()
      self.replicas = self.strategy.num_replicas_in_sync
      self.is_chief = distribution.is_chief(self.strategy)
    if self.saved_batches is not None:
      self.saved_batches.check_hparams(self.hparams)
      if self.saved_batches.replicas != self.replicas:
        raise numpy_batches.NumpyBatchesError(
            f"{numpy_batches.FLAG}={self.saved_batches.directory} holds batches for "
            f"{self.saved_batches.replicas} device(s), this machine trains on {self.replicas}")
    if self.is_chief:  # One trainer per directory; the chief alone writes it.
      run_lock.acquire(output_dir)
      resume.remove_leftovers(output_dir)
      if options.overwrite_run:
        resume.set_aside_for_overwrite(output_dir)
      resume.check_not_orphaned(output_dir, run_dir.RUN_FILE)
      run_info = dict(run_info or {}, problem=problem.name, model=model_name,
                      random_seed=options.random_seed, backend=self.backend,
                      data=run_identity.data_identity(problem, data_dir),
                      **{run_identity.TOKENS_KEY: self.hparams.tokens_per_update(self.replicas),
                         run_identity.PIPELINE_KEY: run_identity.UNTUNED})
      if options.warm_start_from:
        run_info["warm_start_from"] = options.warm_start_from
      run_identity.check_resume(output_dir, run_dir.load_run_info(output_dir), run_info)
      run_dir.prepare(output_dir, self.hparams, run_info)
    keras.utils.set_random_seed(options.random_seed)  # The same seed on every worker.

    with self._scope():
      self.model = registry.model(model_name)(self.hparams)
      self.optimizer = make_optimizer(self.hparams, options.train_steps)
      self.optimizer.build(self.model.trainable_variables)
    longest = self.hparams.longest_training_side
    dropped = problem.count_longer_than(data_dir, "train", longest)
    if dropped:
      logging.info("%s=%d drops %d training pairs with a longer side (EOS included)",
                   "packed rows of" if longest != self.hparams.max_length else "max_length",
                   longest, dropped)
    if self.saved_batches is not None:
      self.num_buckets = self.saved_batches.num_buckets
      self.train_iterator = numpy_batches.BatchStream(self.saved_batches)
    else:
      train_examples = problem.dataset("train", data_dir)
      self.num_buckets = input_pipeline.num_buckets(train_examples, self.hparams)
      self.input_tuned = run_identity.input_tuned(run_dir.load_run_info(output_dir))
      if self.input_tuned:
        logging.info("--output_dir=%s was started with tf.data's autotuning on its training "
                     "stream, whose iterator its checkpoints hold: it keeps it", output_dir)
      train_data = input_pipeline.training_dataset(
          train_examples, self.hparams, seed=options.random_seed, replicas=self.replicas,
          autotune=self.input_tuned)
      self.train_iterator = iter(train_data)  # Global batches; the step splits them.
    self.dev_decoding = None if self.jax else dev_decoding
    self.best = self._make_best_keeper()
    self._attention_sentence = None  # The dev sentence of attention/*, read at the first one.
    self._seconds_before = 0.0  # Training seconds before this process (from the checkpoint).
    self.write_dir = (output_dir if self.jax else
                      distribution.checkpoint_write_dir(output_dir, self.strategy))
    if self.jax:
      from t2tlite.training import jax_step
      self.jax_trainer = jax_step.JaxTrainer(self.model, self.optimizer, self.hparams,
                                             self.distribution)
      self.train_step = self.jax_trainer.train_step
      self.eval_step = self.jax_trainer.eval_step
    else:
      self.train_step = train_step.make_train_step(
          self.model, self.optimizer, self.hparams, self.strategy)
      self.eval_step = train_step.make_eval_step(self.model, self.hparams, self.strategy)
    self._make_checkpoint()
    self.manager = self._make_manager()
    self._logged = {"train": -1, "eval": -1}  # Last steps already in TensorBoard (resumes).
    if tf is None:
      self.train_writer = progress.CsvScalarWriter(output_dir)
      self.eval_writer = progress.CsvScalarWriter(os.path.join(output_dir, "eval"))
    elif self.is_chief:
      self.train_writer = tf.summary.create_file_writer(output_dir)
      self.eval_writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    else:
      self.train_writer = self.eval_writer = tf.summary.create_noop_writer()
    self._compilations = {"train": 0, "eval": 0}  # Traces (XLA compilations) seen so far.

  # --- What differs per backend ---
  def _check_backend_options(self, strategy) -> None:
    """Settings one backend cannot honour: one line each, before any work."""
    opts = self.options
    if tf is None and self.saved_batches is None:
      raise numpy_batches.NumpyBatchesError(
          "TensorFlow is not installed, so the problem's data cannot be read: train from "
          "batches saved as numpy (t2t-datagen --numpy_batches=DIR on a machine with "
          "TensorFlow, then --numpy_batches=DIR)")
    if not self.jax:
      if self.saved_batches is not None:
        raise numpy_batches.NumpyBatchesError(
            f"{numpy_batches.FLAG} feeds the JAX trainer; under TensorFlow train from "
            "--problem/--data_dir (the same batches)")
      return
    if strategy is not None:
      raise backends.BackendError("--backend=jax: multi-device training uses "
                                  "keras.distribution over the JAX devices, not a tf.distribute "
                                  "strategy (--num_gpus/--worker_hosts are TensorFlow's)")
    check_keep_best_backend(opts.keep_best, self.backend)

  def _scope(self):
    """Where the model and optimizer are built: the tf.distribute strategy's scope (TF)."""
    import contextlib
    return contextlib.nullcontext() if self.jax else self.strategy.scope()

  def _multi_worker(self) -> bool:
    return not self.jax and isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)

  def _make_checkpoint(self) -> None:
    """What a checkpoint holds: model, optimizer, position in the data, seconds trained.

    TensorFlow: the variables themselves. JAX: mirrors under the same keys
    (checkpoints.VariableMirror), filled before each save. Without
    TensorFlow: the .npz of npz_checkpoints.py.
    """
    self._mirrors = []
    if tf is None:
      self.checkpoint = None
      return
    # Wall time spent training so far, resumes included (what --train_seconds bounds).
    self.seconds_trained = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                       name="seconds_trained")
    if self.saved_batches is not None:
      data = {"batches_read": tf.Variable(0, dtype=tf.int64, trainable=False)}
    else:
      data = {"train_iterator": self.train_iterator}
    if not self.jax:
      self.checkpoint = tf.train.Checkpoint(
          model=checkpoints.model_trackable(self.model), optimizer=self.optimizer,
          seconds_trained=self.seconds_trained, **data)
      return
    model_mirror = checkpoints.model_mirror(self.model)
    optimizer_mirror = checkpoints.optimizer_mirror(self.optimizer)
    self._mirrors = [model_mirror, optimizer_mirror]
    self.checkpoint = tf.train.Checkpoint(
        model=model_mirror.trackable, optimizer=optimizer_mirror.trackable,
        seconds_trained=self.seconds_trained, **data)

  def _sync_model(self) -> None:
    """JAX: writes the training state into the Keras variables (before anything reads them)."""
    if self.jax:
      self.jax_trainer.write_to_model()

  def _npz_arrays(self) -> dict:
    """Everything a checkpoint without TensorFlow holds (npz_checkpoints.py)."""
    import numpy as np
    self._sync_model()
    arrays = npz_checkpoints.model_arrays(self.model)
    arrays.update(npz_checkpoints.optimizer_arrays(self.optimizer))
    arrays["seconds_trained"] = np.float64(self._seconds_trained())
    arrays["batches_read"] = np.int64(self.train_iterator.position)
    return arrays

  def _restore_checkpoint(self, prefix: str) -> None:
    """Loads checkpoint `prefix` into the model, optimizer and data position; raises if it cannot."""
    if tf is None:
      arrays = npz_checkpoints.read(prefix)
      npz_checkpoints.restore_model(self.model, prefix, arrays)
      npz_checkpoints.restore_optimizer(self.optimizer, prefix, arrays)
      self._seconds_before = float(arrays["seconds_trained"])
      self.train_iterator.position = int(arrays["batches_read"])
    else:
      self.checkpoint.restore(prefix).assert_existing_objects_matched()
      for mirror in self._mirrors:
        mirror.push()
      self._seconds_before = float(self.seconds_trained.numpy())
      if self.saved_batches is not None:
        self.train_iterator.position = int(self.checkpoint.batches_read.numpy())
    if self.jax:
      self.jax_trainer.read_from_model()

  def _learning_rate(self) -> float:
    if self.jax:
      return self.jax_trainer.learning_rate()
    return float(tf.convert_to_tensor(self.optimizer.learning_rate))

  def _make_best_keeper(self) -> Optional[keep_best.BestKeeper]:
    """--keep_best / --early_stopping_patience, checked against what evaluation reports."""
    opts = self.options
    if not opts.keep_best:
      return None
    if opts.keep_best in DECODED_METRICS:
      if not opts.eval_decode or self.dev_decoding is None:
        raise keep_best.BestKeeperError(f"--keep_best={opts.keep_best} is measured by decoding "
                                        "dev: it needs --eval_decode (and a Trainer given "
                                        "dev_decoding, as t2t-trainer's is)")
      if opts.keep_best not in self.problem.eval_metrics:
        raise keep_best.BestKeeperError(
            f"--keep_best={opts.keep_best}: {self.problem.name} reports "
            f"{', '.join(self.problem.eval_metrics)} (or loss, nll, perplexity) on dev")
    if not self.is_chief:  # Only the chief decodes dev; every worker follows its verdict.
      return None
    return keep_best.BestKeeper(self.output_dir, opts.keep_best, opts.early_stopping_patience,
                                self._write_weights, self.is_chief,
                                keep=max(1, opts.average_best_n))

  def _write_weights(self, prefix: str) -> None:
    """A model-only checkpoint of the current weights at `prefix` (best/, like averaged/)."""
    self._sync_model()
    checkpoints.write_model(self.model, prefix)

  def _make_manager(self):
    if tf is None:
      return npz_checkpoints.NpzCheckpointManager(self.write_dir,
                                                  self.options.keep_checkpoint_max,
                                                  self._npz_arrays)
    return tf.train.CheckpointManager(
        self.checkpoint, self.write_dir,
        max_to_keep=self.options.keep_checkpoint_max if self.is_chief else 1,
        step_counter=None if self.jax else self.optimizer.iterations)

  @property
  def step(self) -> int:
    if self.jax:
      return self.jax_trainer.iterations
    return int(self.optimizer.iterations.numpy())

  def restore(self) -> int:
    """Restores the latest checkpoint, if any; returns the step training resumes from.

    Every worker reads the chief's checkpoint, in --output_dir: the newest
    that verifies and loads (resume.restore_newest).
    """
    latest = resume.restore_newest(self._restore_checkpoint, self.output_dir, self.is_chief)
    self._restored = latest  # The same on every worker: all read the chief's directory.
    if latest:
      logging.info("restored %s: resuming at step %d", latest, self.step)
    else:
      logging.info("no checkpoint in %s yet: starting from step 0", self.output_dir)
    if self.is_chief:
      self.manager = self._make_manager()  # Sees only the checkpoints kept.
    # Every worker reads the chief's events too: what is left to evaluate must be the same
    # on all of them (each takes part in dev's teacher-forced pass).
    if tf is None:
      self._logged = {"train": self.train_writer.last_step(),
                      "eval": self.eval_writer.last_step()}
    else:
      self._logged = {"train": resume.last_logged_step(self.output_dir),
                      "eval": resume.last_logged_step(os.path.join(self.output_dir, "eval"))}
    if not self.jax:
      distribution.decorrelate_dropout(self.model, self.strategy)
    return self.step

  def save(self) -> str:
    """Saves on every worker (the documented pattern); only the chief's copy is kept."""
    prefix = os.path.join(self.write_dir, f"ckpt-{self.step}")
    if self.is_chief and checkpoint_manifest.checkpoint_files(prefix):
      raise checkpoint_manifest.CheckpointError(f"{prefix} exists and is not the checkpoint "
                                                "this run resumed from: not overwriting it")
    if tf is not None:
      self.seconds_trained.assign(self._seconds_trained())
      if self.saved_batches is not None:
        self.checkpoint.batches_read.assign(self.train_iterator.position)
      self._sync_model()
      for mirror in self._mirrors:
        mirror.pull()
    path = self.manager.save(checkpoint_number=self.step)
    if self.is_chief:
      checkpoint_manifest.write_manifest(path)  # Last: marks the checkpoint complete.
      resume.remove_orphan_manifests(self.output_dir)
      logging.info("saved checkpoint %s", path)
    else:
      distribution.discard_write_dir(self.write_dir, self.output_dir)
    return path

  def train(self) -> dict:
    """Runs to `train_steps`; returns the last evaluation metrics."""
    opts = self.options
    step = self.restore()
    if self._restored is None:
      if opts.warm_start_from:  # Before ckpt-0, so a resume starts from the loaded weights.
        warm_start.warm_start(self.model, opts.warm_start_from, opts.warm_start_skip_embeddings,
                              run_identity.data_identity(self.problem, self.data_dir))
        if self.jax:  # The step's state is taken from the Keras variables again.
          self.jax_trainer.read_from_model()
      self.save()  # ckpt-0: a run killed before its first periodic save still resumes.
    elif opts.warm_start_from:
      logging.info("%s holds checkpoints: resuming at step %d; --warm_start_from=%s is only "
                   "read by a new run", self.output_dir, step, opts.warm_start_from)
    # A rerun of a finished run trains nothing: its steps, or its --train_seconds, are spent.
    time_spent = self._time_budget_spent()
    finished_before = step >= opts.train_steps or time_spent
    if step == 0 and self._logged["train"] < 0 and tf is not None:
      with self.train_writer.as_default(step=0):
        tf.summary.text("hparams", "```\n" + json.dumps(self.hparams.to_dict(), indent=2) + "\n```")
    hp = self.hparams
    logging.info("training %s on %s: %d parameters, steps %d -> %d, dtype %s, %s",
                 type(self.model).__name__, self.problem.name, self.model.count_params(),
                 step, opts.train_steps, hp.dtype, self._compiled_with())
    logging.info("%s", self._describe_devices())
    if hp.learning_rate_decay_steps:
      logging.info("learning rate: linear decay to 0 from step %d to --train_steps=%d "
                   "(learning_rate_decay_steps=%d)%s", max(opts.train_steps -
                   hp.learning_rate_decay_steps, 0), opts.train_steps,
                   hp.learning_rate_decay_steps,
                   "; --train_seconds may stop the run first" if opts.train_seconds else "")
    if self.jax and opts.eval_decode:
      logging.info("--backend=jax: dev is not decoded during training (beam search runs under "
                   "TensorFlow); decode the saved checkpoints with t2t-decoder")
    elif opts.eval_decode and self.dev_decoding is None:
      logging.info("dev is scored teacher-forced only: this Trainer was given no dev_decoding")
    logging.info("tokens per update = %d per device x %d devices x %d accumulate_steps = %d",
                 hp.batch_size, self.replicas, hp.accumulate_steps,
                 hp.tokens_per_update(self.replicas))
    window = progress.MetricWindow()
    last_save_time = time.time()
    last_eval = {}
    evaluated_step = None  # The step this call last evaluated: the end does not repeat it.
    skipped = 0
    self._clock = (time.time(), self._seconds_before)
    stopped_early = self.best is not None and self.best.out_of_patience
    if stopped_early:
      logging.info("%s (recorded before this resume): nothing to train", self.best.stop_reason())
    if opts.train_seconds:
      logging.info("time budget: %s of %s used", progress.format_duration(self._seconds_trained()),
                   progress.format_duration(opts.train_seconds))
    with stop_signals.StopSignals() as stops:
      # Several workers stop together: on any one's signal, the chief's dev or its clock
      # (the others have no BestKeeper, and read no clock).
      stop = stop_signals.StopCheck(
          stops, lambda: self.best is not None and self.best.out_of_patience,
          self._out_of_time if self.is_chief else lambda: False,
          distribution.StopAgreement(self.strategy) if self._multi_worker() else None)
      if self._evaluation_missing(step, finished_before or stopped_early):
        logging.info("step %d: its dev evaluation did not finish before the run stopped; "
                     "evaluating it now", step)
        last_eval, evaluated_step = self.evaluate(step, stop.signalled), step
      while step < opts.train_steps and not stop.now():
        batch = self._next_batch()
        self._trace_once_if_shapes_change("train", self.train_step, batch)
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
        due = (step % opts.save_checkpoints_steps == 0 or
               (opts.save_checkpoints_secs and
                time.time() - last_save_time >= opts.save_checkpoints_secs))
        if due and step < opts.train_steps:  # Before evaluating: see the module docstring.
          self.save()
          last_save_time = time.time()
        if (opts.eval_every and step % opts.eval_every == 0 and step < opts.train_steps
            and not stop.signalled()):
          last_eval, evaluated_step = self.evaluate(step, stop.signalled), step
    stopped_early = stopped_early or stop.out_of_patience
    if self.manager.latest_checkpoint != os.path.join(self.write_dir, f"ckpt-{step}"):
      self.save()  # The final step (or the early stop's), unless it was just saved.
    if stop.signalled():  # No evaluation or averaging: the user wants it to stop.
      raise stop_signals.StopRequested(stop.signal, step, self.manager.latest_checkpoint)
    if stopped_early:
      logging.info("%s; stopped at step %d of %d", self.best.stop_reason() if self.best else
                   "early stopping on the chief's dev evaluation", step, opts.train_steps)
    elif finished_before and self._logged["eval"] >= step:
      spent = (f"--train_seconds={opts.train_seconds} spent" if time_spent else
               f">= --train_steps={opts.train_steps}")
      logging.info("step %d %s: nothing to train; the evaluation at step %d is already in "
                   "TensorBoard", step, spent, step)
    elif evaluated_step != step:  # --train_seconds may run out right after an evaluation.
      last_eval = self.evaluate(step)
    if (opts.average_last_n or opts.average_best_n) and self.is_chief:
      self._average()
    self._sync_model()
    logging.info("step %d: weights checksum %s", step, checkpoints.weights_checksum(self.model))
    if not self.jax:
      distribution.barrier(self.strategy)
    return last_eval

  def _next_batch(self):
    """The next global training batch: tf tensors (TF), numpy (JAX)."""
    if self.saved_batches is not None:
      return next(self.train_iterator)
    try:
      batch = next(self.train_iterator)
    except tf.errors.DataLossError as e:  # Name the shard and record, not a byte offset.
      raise shard_manifest.data_loss_error(
          shard_manifest.split_shards(self.problem, self.data_dir, "train"), e) from None
    return {k: v.numpy() for k, v in batch.items()} if self.jax else batch

  def _compiled_with(self) -> str:
    if self.jax:
      return "backend jax (jax.jit, one compilation per batch shape)"
    hp = self.hparams
    return f"xla {hp.xla} ({'on' if xla_choice.train_xla(hp) else 'off'})"

  def _describe_devices(self) -> str:
    if not self.jax:
      return distribution.describe(self.strategy)
    import jax
    devices = jax.devices()
    how = "keras.distribution.DataParallel" if self.distribution is not None else "one device"
    return f"JAX on {len(devices)} {devices[0].platform} device(s): {how}"

  def _average(self) -> None:
    """Writes averaged/ and averaged_best/, keeping any already there (a rerun)."""
    opts = self.options
    if opts.average_last_n:
      averaging.average_checkpoints(self.output_dir, opts.average_last_n, keep_existing=True)
    if opts.average_best_n:
      if keep_best.kept_checkpoints(self.output_dir).checkpoints:
        averaging.average_checkpoints(self.output_dir, opts.average_best_n, best=True,
                                      keep_existing=True)
      else:
        logging.warning("--average_best_n=%d: no dev %s was ever reported, so best/ holds "
                        "nothing to average", opts.average_best_n, opts.keep_best)

  def _evaluation_missing(self, step: int, finished: bool) -> bool:
    """Whether the restored step was due a dev evaluation that never reached TensorBoard.

    A stop signal abandons an evaluation, and a kill cuts it short; the step itself was
    saved first. Every worker reads the chief's events (restore), so all agree.
    """
    every = self.options.eval_every
    return bool(every and 0 < step < self.options.train_steps and step % every == 0
                and self._logged["eval"] < step and not finished)

  def evaluate(self, step: Optional[int] = None,
               stopping: Optional[Callable[[], bool]] = None) -> dict:
    """Dev metrics (`dev_metrics`) at `step`: logged, written to TensorBoard, shown to --keep_best.

    `stopping() -> True` abandons the evaluation between dev batches: nothing is
    written, and {} is returned.
    """
    step = self.step if step is None else step
    scalars = self.dev_metrics(stopping)
    if scalars is None:
      logging.info("step %d: dev evaluation abandoned on a stop signal; resuming evaluates "
                   "this step first", step)
      return {}
    if not scalars:
      return {}
    if step > self._logged["eval"]:  # A resumed run does not log a step twice.
      progress.write_scalars(self.eval_writer, step, scalars)
      if self.options.attention_summaries and self.is_chief and tf is not None:
        self._sync_model()
        self._log_attention(step)
    logging.info("eval step %d | %s", step, " ".join(f"{k} {v:.4f}" for k, v in scalars.items()))
    if self.best is not None:
      self.best.observe(step, scalars)  # May write best/: _write_weights syncs first.
    return scalars

  def dev_metrics(self, stopping: Optional[Callable[[], bool]] = None) -> Optional[dict]:
    """Teacher-forced loss, NLL, perplexity and accuracies on dev, and the decoded metrics.

    None where `stopping()` turned true before the last dev batch or the decode's.
    """
    stopping = stopping or (lambda: False)
    if not self.problem.has_data("dev", self.data_dir):
      logging.warning("no dev data for %s in %s: evaluation skipped", self.problem.name,
                      self.data_dir)
      return {}
    window = progress.MetricWindow()
    started, batches = time.time(), 0
    for batch in self._dev_batches():
      if stopping():
        return None
      self._trace_once_if_shapes_change("eval", self.eval_step, batch)
      window.add(self.eval_step(batch))
      self._log_compilation("eval", self.eval_step, batch)
      batches += 1
    metrics = window.result()
    logging.info("dev scored teacher-forced: %d batches in %.1f s", batches,
                 time.time() - started)
    scalars = {k: metrics[k] for k in ("loss", "nll", "perplexity", "accuracy",
                                       "sequence_accuracy")}
    if stopping():
      return None
    # Decoding needs no other worker; it is TensorFlow's (the train() log says so under JAX).
    if self.options.eval_decode and self.dev_decoding is not None and self.is_chief:
      decoded = self.dev_decoding(self.model, stopping)
      if decoded is None:
        return None
      scalars.update(decoded)
    return scalars

  def _dev_batches(self):
    """Every dev batch (the first --eval_steps): tf tensors (TF), numpy (JAX)."""
    limit = self.options.eval_steps or None
    if self.saved_batches is not None:
      batches = self.saved_batches.dev_batches()
      for i, batch in enumerate(batches):
        if limit is not None and i >= limit:
          return
        yield batch
      return
    # A step compiled per shape gets one shape per bucket; TensorFlow without XLA
    # traces shape-relaxed, so filler rows would only be work.
    static = self.jax or xla_choice.train_xla(self.hparams)
    data = input_pipeline.evaluation_dataset(
        self.problem.dataset("dev", self.data_dir), self.hparams, replicas=self.replicas,
        static_shapes=static)
    if limit:
      data = data.take(limit)
    try:
      for batch in data:
        yield {k: v.numpy() for k, v in batch.items()} if self.jax else batch
    except tf.errors.DataLossError as e:
      raise shard_manifest.data_loss_error(
          shard_manifest.split_shards(self.problem, self.data_dir, "dev"), e) from None

  def _log_attention(self, step: int) -> None:
    """attention/* images of the first dev sentence (t2tlite/visualization/summary.py)."""
    from t2tlite.visualization import summary
    if self._attention_sentence is None:  # () when dev has no usable sentence.
      self._attention_sentence = summary.fixed_dev_sentence(self.problem, self.data_dir) or ()
    if self._attention_sentence:
      summary.write_attention_summaries(self.eval_writer, step, self.model,
                                        self._attention_sentence)

  def _seconds_trained(self) -> float:
    """Training wall time so far: before this process (from the checkpoint) plus since its loop began."""
    started, before = getattr(self, "_clock", (time.time(), self._seconds_before))
    return before + time.time() - started

  def _time_budget_spent(self) -> bool:
    """Whether --train_seconds (if set) is used up, resumes included."""
    budget = self.options.train_seconds
    return bool(budget) and self._seconds_trained() >= budget

  def _out_of_time(self) -> bool:
    if not self._time_budget_spent():
      return False
    logging.info("--train_seconds=%d reached at step %d (%s of training)",
                 self.options.train_seconds, self.step,
                 progress.format_duration(self._seconds_trained()))
    return True

  def _log_train(self, step, window):
    metrics = window.result()
    learning_rate = self._learning_rate()
    seconds_left = (self.options.train_seconds - self._seconds_trained()
                    if self.options.train_seconds else None)
    logging.info("%s", progress.progress_line(step, self.options.train_steps, metrics,
                                              learning_rate, window.steps, seconds_left))
    scalars = {k: metrics[k] for k in ("loss", "nll", "perplexity", "accuracy", "grad_norm")}
    scalars.update(learning_rate=learning_rate,
                   tokens_per_sec=metrics["tokens"] / max(metrics["seconds"], 1e-9),
                   xla_compilations=sum(self._compilations.values()))
    if step > self._logged["train"]:  # Replayed after a resume: already logged.
      progress.write_scalars(self.train_writer, step, scalars)

  def _trace_once_if_shapes_change(self, kind, step_fn, batch):
    """Without XLA, a step whose batches change shape (bucketed training, dev) is traced once,
    for any shape, before its first call (train_step.trace_for_any_shape). Called each step:
    once traced, the trace count alone answers (no device listing under xla=auto)."""
    if (not self.jax and not train_step.compilations(step_fn)
        and not xla_choice.train_xla(self.hparams) and self._shapes_change(kind)):
      train_step.trace_for_any_shape(step_fn, batch)

  def _shapes_change(self, kind):
    """Dev's batches are bucketed; training's are unless one bucket holds them (packed rows)."""
    return kind == "eval" or self.num_buckets > 1

  def _log_compilation(self, kind, step_fn, batch):
    """Logs each new trace of `step_fn` (with XLA: one compilation per bucket shape)."""
    if self.jax:
      count = getattr(self.jax_trainer, f"{kind}_traces")
    else:
      count = train_step.compilations(step_fn)
    if count == self._compilations[kind]:
      return
    self._compilations[kind] = count
    compiled = self.jax or xla_choice.train_xla(self.hparams)
    if compiled:
      bound = f" (at most {self.num_buckets} bucket shapes)" if kind == "train" else ""
    else:
      bound = (" (xla=false: traced once, for any shape)" if self._shapes_change(kind) else
               " (xla=false: one shape; a second would relax it to any shape)")
    logging.info("%s step %s #%d: global batch shape %s%s", kind,
                 "jax.jit compilation" if self.jax else
                 "XLA compilation" if compiled else "trace", count,
                 list(batch["targets"].shape), bound)
