"""Faults injected into runs and data, and the exact outcome of each (README: "Faults").

Each test breaks one thing the way a crash, a full disk or a user does
(truncate a file, flip a byte, delete an index, a second trainer, another
data_dir, a flag mistake) and asserts what happens: the checkpoint training
falls back to, with the older ones unchanged byte for byte; or the one-line
error and exit status 2. The run is tiny (a d_model=32 model, 8 steps) and
trained once; tests copy it before breaking it.
"""

import errno
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from t2tlite import errors, files, registry
from t2tlite.data import shard_manifest
from t2tlite.training import (averaging, checkpoint_manifest, resume, run_dir, run_identity,
                               run_lock, stop_signals)
from t2tlite.training.options import TrainOptions, TrainOptionsError
from t2tlite.training.trainer import Trainer
from tests.helpers import command, one_line_error, run, scalar_events

FAST = dict(d_model=32, d_ff=64, num_heads=4, batch_size=256, length_bucket_step=2.0,
            learning_rate_warmup_steps=100, xla=False)


def copy_problem():
  problem = registry.problem("algorithmic_copy")
  problem.split_sizes = {"train": 400, "dev": 20, "test": 20}
  return problem


def make_trainer(output_dir, steps=8, problem=None, data_dir=None, **options):
  hp = registry.hparams("transformer_tiny").replace(**FAST)
  opts = TrainOptions(**dict(dict(
      train_steps=steps, eval_every=0, eval_steps=1, log_every=2, save_checkpoints_steps=4,
      save_checkpoints_secs=0, eval_decode=False), **options))
  return Trainer(problem or copy_problem(), hp, str(output_dir), data_dir=data_dir, options=opts)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A finished 8-step run: ckpt-0, ckpt-4, ckpt-8. This process holds its lock."""
  trainer = make_trainer(tmp_path_factory.mktemp("faults") / "run")
  trainer.train()
  return trainer.output_dir


@pytest.fixture
def run_copy(trained, tmp_path):
  """A copy of the trained run to break (copied files: not locked)."""
  path = str(tmp_path / "run")
  shutil.copytree(trained, path)
  return path


def digests(output_dir, steps):
  """{file name: sha256} of every file of checkpoints `steps`: to show they are untouched."""
  result = {}
  for step in steps:
    for path in checkpoint_manifest.all_files(os.path.join(output_dir, f"ckpt-{step}")):
      with open(path, "rb") as f:
        result[os.path.basename(path)] = hashlib.sha256(f.read()).hexdigest()
  return result


def data_file(output_dir, step):
  return next(p for p in checkpoint_manifest.checkpoint_files(os.path.join(output_dir, f"ckpt-{step}"))
              if ".data-" in p)


def truncate(path, keep=0.5):
  size = os.path.getsize(path)
  with open(path, "r+b") as f:
    f.truncate(int(size * keep))


def flip_byte(path, where=0.5):
  with open(path, "r+b") as f:
    f.seek(int(os.path.getsize(path) * where))
    byte = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([byte[0] ^ 0xFF]))


# --- Checkpoints ------------------------------------------------------------------------

def test_every_checkpoint_has_a_manifest_that_verifies(trained):
  prefixes = checkpoint_manifest.list_checkpoints(trained)
  assert [checkpoint_manifest.step_of(p) for p in prefixes] == [0, 4, 8]  # ckpt-0 first thing.
  for prefix in prefixes:
    manifest = checkpoint_manifest.read_manifest(prefix)
    assert sorted(manifest["files"]) == sorted(
        os.path.basename(p) for p in checkpoint_manifest.checkpoint_files(prefix))
    assert checkpoint_manifest.verify(prefix) == ("ok", "")


@pytest.mark.parametrize("fault", ["truncate data", "flip a data byte", "delete the index"])
def test_damaged_newest_checkpoint_falls_back_and_keeps_older_ones(run_copy, fault, caplog):
  older = digests(run_copy, [0, 4])
  if fault == "truncate data":
    truncate(data_file(run_copy, 8))
    reason = "bytes, its manifest says"
  elif fault == "flip a data byte":
    flip_byte(data_file(run_copy, 8))
    reason = "SHA-256 differs from its manifest"
  else:
    os.remove(os.path.join(run_copy, "ckpt-8.index"))
    reason = "ckpt-8.index is missing"
  caplog.set_level(logging.WARNING)
  trainer = make_trainer(run_copy, steps=12, keep_checkpoint_max=3)
  assert trainer.restore() == 4
  warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
  assert any("ckpt-8 skipped" in w and reason in w for w in warnings), warnings
  assert any("resuming from ckpt-4" in w for w in warnings), warnings
  # The damaged files are kept aside, not deleted; ckpt-8 is free to be written again.
  assert os.listdir(os.path.join(run_copy, "corrupt"))
  if fault != "flip a data byte":
    return  # What follows the fallback is the same for every fault: trained once (CI time).
  trainer.train()
  # Rotation (keep 3) dropped ckpt-0 only; ckpt-4 is byte for byte what it was.
  assert [checkpoint_manifest.step_of(p) for p in checkpoint_manifest.list_checkpoints(run_copy)] \
      == [4, 8, 12]
  assert digests(run_copy, [4]) == {k: v for k, v in older.items() if k.startswith("ckpt-4.")}


def test_checkpoint_without_manifest_loads_and_gets_one(run_copy):
  """A kill between the save and its manifest: the checkpoint is tried, loads, and is recorded."""
  os.remove(checkpoint_manifest.manifest_path(os.path.join(run_copy, "ckpt-8")))
  assert checkpoint_manifest.verify(os.path.join(run_copy, "ckpt-8"))[0] == "unverified"
  assert make_trainer(run_copy).restore() == 8
  assert checkpoint_manifest.verify(os.path.join(run_copy, "ckpt-8")) == ("ok", "")


def test_manifest_module_needs_no_tensorflow():
  """A saver on another framework (JAX, no TensorFlow installed) reuses it as is."""
  code = ("import sys; import t2tlite.training.checkpoint_manifest as m, t2tlite.training.run_lock; "
          "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
  subprocess.run([sys.executable, "-c", code], check=True)


def test_no_loadable_checkpoint_is_an_error_not_a_restart(run_copy):
  for step in (0, 4, 8):
    flip_byte(data_file(run_copy, step))
  before = digests(run_copy, [0, 4, 8])
  trainer = make_trainer(run_copy)
  with pytest.raises(checkpoint_manifest.CheckpointError,
                     match=r"none of its 3 checkpoints loads: ckpt-8 \(.*SHA-256 differs"):
    trainer.restore()
  assert digests(run_copy, [0, 4, 8]) == before  # Nothing moved or rewritten.


def test_averaging_refuses_a_damaged_checkpoint(run_copy):
  from t2tlite.training import averaging
  flip_byte(data_file(run_copy, 8))
  with pytest.raises(checkpoint_manifest.CheckpointError,
                     match=r"ckpt-8: damaged checkpoint \(.*SHA-256 differs from its manifest"):
    averaging.average_checkpoints(run_copy, 2)
  assert not os.path.exists(os.path.join(run_copy, "averaged"))


def test_checkpoints_deleted_is_refused_unless_overwrite_run(run_copy):
  for prefix in checkpoint_manifest.list_checkpoints(run_copy):
    for path in checkpoint_manifest.all_files(prefix):
      os.remove(path)
  with pytest.raises(checkpoint_manifest.CheckpointError,
                     match="holds a run .run.json. whose checkpoints are gone; restore them, or "
                           "pass --overwrite_run"):
    make_trainer(run_copy)
  trainer = make_trainer(run_copy, overwrite_run=True)
  assert trainer.restore() == 0
  assert os.path.exists(os.path.join(run_copy, "previous-1", "run.json"))  # Moved, not deleted.


def test_run_killed_before_its_first_save_resumes(tmp_path):
  out = tmp_path / "run"
  make_trainer(out)  # Writes run.json and hparams.json, then "killed": no checkpoint yet.
  assert os.path.exists(out / "run.json") and not os.path.exists(out / "checkpoint")
  assert make_trainer(out).restore() == 0


def test_resuming_with_another_seed_is_refused(run_copy):
  assert json.load(open(os.path.join(run_copy, "run.json")))["random_seed"] == 1
  with pytest.raises(run_identity.RunMismatchError,
                     match=r"--random_seed=2 but --output_dir=.* was started with "
                           r"--random_seed=1; rerun with 1 or use a new --output_dir"):
    make_trainer(run_copy, random_seed=2)


def test_resuming_with_another_batch_per_update_is_logged(run_copy, caplog):
  """batch_size is per device: resuming on another device count is allowed (as in
  tensor2tensor) but changes every update's batch, so it is logged, never silent."""
  saved = json.load(open(os.path.join(run_copy, "run.json")))
  assert saved[run_identity.TOKENS_KEY] == run_dir.load_hparams(run_copy).batch_size  # 1 device.
  with caplog.at_level(logging.WARNING):
    make_trainer(run_copy)  # The same device count: nothing said.
    assert "tokens per update" not in caplog.text
    run_identity.check_resume(run_copy, saved, dict(saved, tokens_per_update=2 * saved[
        run_identity.TOKENS_KEY]))
  assert (f"started with {saved[run_identity.TOKENS_KEY]} target tokens per update; this "
          f"resume trains with {2 * saved[run_identity.TOKENS_KEY]}") in caplog.text


def test_a_run_recorded_before_the_untuned_input_stream_keeps_its_tuned_stream(tmp_path, caplog):
  """Runs started before 2026-12-01 trained on a stream with tf.data's autotuning, whose
  iterator their checkpoints hold; an untuned stream cannot restore it, and a resume
  would skip every checkpoint as damaged. Their run.json has no PIPELINE_KEY: they keep it."""
  out = tmp_path / "run"
  assert not run_identity.input_tuned({})  # No run.json yet (a worker before its chief).
  assert not make_trainer(out).input_tuned  # A new run: untuned, and run.json says so.
  saved = json.loads((out / "run.json").read_text())
  assert saved.pop(run_identity.PIPELINE_KEY) == run_identity.UNTUNED
  (out / "run.json").write_text(json.dumps(saved))  # As recorded before the key existed.
  old = make_trainer(out, steps=4)
  assert old.input_tuned
  old.train()  # ckpt-0 and ckpt-4, each with the tuned stream's iterator.
  with caplog.at_level(logging.WARNING):
    resumed = make_trainer(out, steps=6)
    assert resumed.input_tuned and resumed.restore() == 4
  assert "skipped" not in caplog.text
  # The same checkpoints in a run recorded untuned do not load: what the key protects.
  (out / "run.json").write_text(json.dumps(dict(saved, **{
      run_identity.PIPELINE_KEY: run_identity.UNTUNED})))
  with caplog.at_level(logging.WARNING):
    assert make_trainer(out, steps=6).restore() == 0
  assert "ckpt-4 skipped: does not load" in caplog.text


def test_keep_checkpoint_max_0_is_refused_before_the_run_dir_exists(tmp_path):
  with pytest.raises(TrainOptionsError, match="--keep_checkpoint_max=0: must be >= 1"):
    make_trainer(tmp_path / "run", keep_checkpoint_max=0)
  assert not os.path.exists(tmp_path / "run")


def test_checkpoint_path_forms(trained):
  prefix = os.path.join(trained, "ckpt-4")
  assert resume.resolve_checkpoint_path(prefix + ".index") == prefix
  assert resume.resolve_checkpoint_path(prefix + ".data-00000-of-00001") == prefix
  with pytest.raises(checkpoint_manifest.CheckpointError, match=r"ckpt-200: no such checkpoint "
                     r"\(checkpoints there: ckpt-0, ckpt-4, ckpt-8\)"):
    resume.resolve_checkpoint_path(os.path.join(trained, "ckpt-200"))
  with pytest.raises(checkpoint_manifest.CheckpointError, match="is a directory; name a "
                     "checkpoint prefix, e.g. .*ckpt-8"):
    resume.resolve_checkpoint_path(trained)
  model, path = run_dir.load_model(trained, prefix + ".index")  # Accepted as ckpt-4.
  assert path == prefix


# --- Quiet oddities ---------------------------------------------------------------------

def event_steps(directory):
  return [step for step, _ in scalar_events(directory, "loss")]


def test_rerun_of_a_finished_run_adds_no_evaluation(run_copy):
  before = event_steps(os.path.join(run_copy, "eval"))
  assert make_trainer(run_copy, steps=8).train() == {}
  assert make_trainer(run_copy, steps=5).train() == {}
  assert event_steps(os.path.join(run_copy, "eval")) == before == [8]


def test_resume_does_not_log_replayed_steps_twice(run_copy):
  # As if killed after logging step 8 but before saving ckpt-8.
  for path in checkpoint_manifest.all_files(os.path.join(run_copy, "ckpt-8")):
    os.remove(path)
  resume.write_state(run_copy)
  assert make_trainer(run_copy).train()  # Resumes at 4, replays 5..8.
  assert event_steps(run_copy) == [2, 4, 6, 8]


def test_last_logged_step_counts_the_records_a_kill_left_whole(tmp_path):
  """A kill mid-write leaves an event file cut inside a record: the steps of the whole records
  before the cut count, those of the cut one do not (the reference: tf.compat.v1's reader)."""
  import tensorflow as tf
  for name, steps in (("a", [1, 2, 3]), ("b", [10, 11, 12])):
    with tf.summary.create_file_writer(str(tmp_path / name)).as_default():
      for step in steps:
        tf.summary.scalar("loss", 1.0 / step, step=step)
  whole = next((tmp_path / "a").iterdir())
  cut = next((tmp_path / "b").iterdir())
  cut.write_bytes(cut.read_bytes()[:-7])  # Inside step 12's record (its CRC and some payload).
  for path in (whole, cut):
    shutil.move(str(path), str(tmp_path / path.name))

  def reference(path):
    seen = []
    try:
      for event in tf.compat.v1.train.summary_iterator(str(path)):
        seen += [event.step] if event.summary.value else []
    except tf.errors.DataLossError:
      pass
    return seen
  assert reference(tmp_path / whole.name) == [1, 2, 3]
  assert reference(tmp_path / cut.name) == [10, 11]
  assert resume.last_logged_step(str(tmp_path)) == 11
  os.remove(tmp_path / cut.name)
  assert resume.last_logged_step(str(tmp_path)) == 3
  assert resume.last_logged_step(str(tmp_path / "a")) == -1  # No event file left there.


def eval_metrics(output_dir, tag):
  """{step: value} of dev metric `tag` in the run's TensorBoard events."""
  events = scalar_events(os.path.join(output_dir, "eval"), tag)
  steps = [step for step, _ in events]
  assert len(set(steps)) == len(steps), f"a step evaluated twice: {steps}"
  return dict(events)


def eval_losses(output_dir):
  return eval_metrics(output_dir, "loss")


def test_time_running_out_right_after_an_evaluation_does_not_evaluate_that_step_again(
    tmp_path, monkeypatch):
  """--train_seconds spent during the evaluation at step 4: the run ends there, and step 4
  is in TensorBoard once (eval_metrics fails on a second point), as is its --keep_best entry."""
  evaluations = []
  out_of_time = Trainer._out_of_time
  monkeypatch.setattr(Trainer, "_out_of_time", lambda self: self.step >= 4 or out_of_time(self))
  trainer = make_trainer(tmp_path / "run", steps=8, eval_every=4, keep_best="loss")
  evaluate = trainer.evaluate

  def counted(step=None, stopping=None):
    evaluations.append(step)
    return evaluate(step, stopping)
  trainer.evaluate = counted
  metrics = trainer.train()
  assert evaluations == [4] and trainer.step == 4
  assert eval_losses(trainer.output_dir) == {4: pytest.approx(metrics["loss"])}


def evaluating_trainer(output_dir):
  """Evaluates dev at steps 4 and 8, teacher-forced and decoded (3 decode batches of 4
  lines, one at a time); step 4 is due a checkpoint too."""
  from t2tlite.decoding.dev_decoding import DevDecoding
  trainer = make_trainer(output_dir, steps=8, eval_every=4, save_checkpoints_steps=4,
                         eval_decode=True, eval_decode_lines=12,
                         eval_decode_hparams="batch_size=4,concurrent_batches=1")
  trainer.dev_decoding = DevDecoding.from_options(trainer.problem, None, trainer.options)
  return trainer


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory):
  """evaluating_trainer's run, never stopped, one for both signalled runs below: (its
  output_dir, [(step, whether that step's checkpoint existed when its dev was read)])."""
  straight = evaluating_trainer(tmp_path_factory.mktemp("straight") / "run")
  read_dev = straight.dev_metrics
  saved_when_read = []

  def dev_metrics(stopping=None):
    step_files = os.path.join(straight.output_dir, f"ckpt-{straight.step}.manifest.json")
    saved_when_read.append((straight.step, os.path.exists(step_files)))
    return read_dev(stopping)
  straight.dev_metrics = dev_metrics
  straight.train()
  return straight.output_dir, saved_when_read


# The teacher-forced pass is slow-marked: the signal lands in the same evaluation, whose stop
# and resume CI checks with the signal in dev decoding, the later of its two passes.
@pytest.mark.parametrize("signalled_in", [pytest.param("teacher-forced", marks=pytest.mark.slow),
                                          "decode"])
def test_sigterm_while_dev_is_evaluated_keeps_the_step_and_the_resume_evaluates_it(
    never_stopped, tmp_path, monkeypatch, signalled_in):
  """Step 4 is saved before dev is read, so a signal (or a kill) while dev is evaluated
  loses no training. SIGTERM during the teacher-forced pass or between decode batches
  abandons the evaluation; the same command evaluates step 4 first and trains on. The
  truth: a run never stopped, whose events the resumed run's must equal value for value."""
  from t2tlite.decoding.pipeline import DecodePipeline
  straight_dir, saved_when_read = never_stopped
  assert saved_when_read == [(4, True), (8, True)]
  expected = eval_losses(straight_dir)
  assert sorted(expected) == [4, 8]

  out = str(tmp_path / "stopped")
  stopped = evaluating_trainer(out)
  signalled, decode_batches_done = [], []

  def sigterm_once():  # Once: the first signal only asks; a second would end the process.
    if not signalled:
      signalled.append(stopped.step)
      signal.raise_signal(signal.SIGTERM)  # Handled before it returns, in this thread.
  if signalled_in == "teacher-forced":
    eval_step = stopped.eval_step

    def eval_step_then_sigterm(batch):
      sigterm_once()
      return eval_step(batch)
    eval_step_then_sigterm.experimental_get_tracing_count = eval_step.experimental_get_tracing_count
    eval_step_then_sigterm.get_concrete_function = eval_step.get_concrete_function
    stopped.eval_step = eval_step_then_sigterm
  else:
    decode = DecodePipeline.decode

    def decode_with_sigterm(self, sources, references=None, progress=None):
      def after_each_batch(lines_done):
        decode_batches_done.append(lines_done)
        sigterm_once()
        progress(lines_done)
      return decode(self, sources, references, progress=after_each_batch)
    monkeypatch.setattr(DecodePipeline, "decode", decode_with_sigterm)
  with pytest.raises(stop_signals.StopRequested,
                     match=r"stopped by SIGTERM at step 4, saved .*ckpt-4: the same command"):
    stopped.train()
  assert signalled == [4]
  assert decode_batches_done == ([] if signalled_in == "teacher-forced" else [4])  # Of 3.
  assert os.path.exists(os.path.join(out, "ckpt-4.manifest.json"))
  assert not os.path.exists(os.path.join(out, "ckpt-5.index"))
  assert eval_losses(out) == {}  # Abandoned: nothing written for step 4.

  monkeypatch.undo()
  evaluating_trainer(out).train()
  assert eval_losses(out) == expected
  decoded = eval_metrics(straight_dir, "exact_match")
  assert sorted(decoded) == [4, 8] and eval_metrics(out, "exact_match") == decoded


def test_leftovers_of_a_killed_write_are_removed_at_start(run_copy):
  leftovers = ["run.json.tmp", "hparams.json.incomplete", "ckpt-12.manifest.json.incomplete",
               "checkpoint.tmp" + "0" * 32, "ckpt-12_temp/part-00000-of-00001.data-00000-of-00001"]
  in_averages = [os.path.join(folder, "ckpt-12.index.incomplete")
                 for folder in (averaging.AVERAGED_DIR, averaging.AVERAGED_BEST_DIR)]
  for name in leftovers + in_averages:
    os.makedirs(os.path.dirname(os.path.join(run_copy, name)), exist_ok=True)
    open(os.path.join(run_copy, name), "w").write("half")
  make_trainer(run_copy)
  left = set(os.listdir(run_copy))
  assert not left & {"run.json.tmp", "hparams.json.incomplete", "ckpt-12_temp",
                     "ckpt-12.manifest.json.incomplete", "checkpoint.tmp" + "0" * 32}
  assert {"run.json", "hparams.json", "checkpoint", "ckpt-8.index"} <= left
  assert not [name for name in in_averages if os.path.exists(os.path.join(run_copy, name))]


# --- The run lock -----------------------------------------------------------------------

def test_second_trainer_is_refused_while_the_first_holds_the_lock(trained):
  # This process trained `trained` and still holds its lock: a second trainer on it.
  proc = run("t2t-trainer", "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
             f"--output_dir={trained}", "--train_steps=16", check=False)
  one_line_error(proc, f"--output_dir={trained} is in use by another trainer (pid {os.getpid()} "
                 f"on host ", "wait for it to end, or use another --output_dir")


def test_the_lock_dies_with_its_owner(tmp_path):
  holder = subprocess.Popen([sys.executable, "-c", (
      "import sys, time; from t2tlite.training import run_lock; "
      f"run_lock.acquire({str(tmp_path)!r}); print('held', flush=True); time.sleep(600)")],
      stdout=subprocess.PIPE, text=True)
  assert holder.stdout.readline().strip() == "held"
  with pytest.raises(run_lock.RunLockedError, match=f"pid {holder.pid} on host"):
    run_lock.acquire(str(tmp_path))
  holder.send_signal(signal.SIGKILL)
  holder.wait()
  run_lock.acquire(str(tmp_path))  # No stale lock after kill -9.
  run_lock.release(str(tmp_path))


# --- Run / data consistency -------------------------------------------------------------

def write_corpus(path, words, lines, seed):
  import random
  rng = random.Random(seed)
  with open(path, "w") as f:
    for _ in range(lines):
      f.write(" ".join(rng.choice(words) for _ in range(rng.randint(2, 8))) + "\n")
  return str(path)


def translate_data(tmp_path, name, vocab_size, train_lines=300):
  """A translate_files data_dir from synthetic text (no download)."""
  words = ["".join(c) for c in ("ab", "cd", "abc", "bad", "cab", "dab", "ace", "bead", "dead",
                                "face", "cafe", "deaf", "fade", "bed", "fed")]
  src = write_corpus(tmp_path / f"{name}.src", words, train_lines, 1)
  tgt = write_corpus(tmp_path / f"{name}.tgt", words[::-1], train_lines, 2)
  dev_s = write_corpus(tmp_path / f"{name}.dsrc", words, 10, 3)
  dev_t = write_corpus(tmp_path / f"{name}.dtgt", words, 10, 4)
  problem = registry.problem("translate_files")
  problem.configure(f"train_source={src},train_target={tgt},dev_source={dev_s},"
                    f"dev_target={dev_t},vocab_size={vocab_size}")
  data_dir = str(tmp_path / name)
  problem.generate_data(data_dir)
  return problem, data_dir


@pytest.fixture(scope="module")
def two_data_dirs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("data")
  return translate_data(tmp, "v275", 275), translate_data(tmp, "v280", 280)


def fake_run(output_dir, problem, data_dir):
  """A run directory as the trainer records it (no checkpoint needed to check data)."""
  os.makedirs(output_dir)
  identity = run_identity.data_identity(problem, data_dir)
  registry.hparams("transformer_tiny").replace(
      input_vocab_size=identity["input_vocab_size"],
      target_vocab_size=identity["target_vocab_size"]).save(run_dir.hparams_path(output_dir))
  with open(os.path.join(output_dir, "run.json"), "w") as f:
    json.dump({"problem": problem.name, "model": "transformer", "data": identity}, f)


def test_decoder_refuses_another_vocabulary_in_one_line(two_data_dirs, tmp_path):
  (problem, v275), (_, v280) = two_data_dirs
  out = str(tmp_path / "run")
  fake_run(out, problem, v275)
  info, hp = run_dir.load_run_info(out), run_dir.load_hparams(out)
  run_identity.check_data(out, info, hp, problem, v275)  # The same data passes.
  proc = run("t2t-decoder", "--problem=translate_files", f"--data_dir={v280}",
             f"--output_dir={out}", "--decode_split=dev", check=False)
  one_line_error(proc, f"--data_dir={v280} holds translate_files, vocab.translate_files.280.model",
                 "vocab sizes 280/280", f"--output_dir={out} was trained on translate_files, "
                 "vocab.translate_files.275.model", "vocab sizes 275/275")


def test_decoder_and_averaging_refuse_another_problem(trained):
  proc = run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={trained}",
             "--decode_split=dev", check=False)
  one_line_error(proc, f"--problem=algorithmic_reverse but --output_dir={trained} was trained "
                 "on algorithmic_copy")
  with pytest.raises(run_identity.RunMismatchError, match="was trained on algorithmic_copy"):
    run_identity.check_data(trained, run_dir.load_run_info(trained),
                            run_dir.load_hparams(trained), registry.problem("algorithmic_reverse"),
                            None, command="averaged")


# --- Data shards ------------------------------------------------------------------------

def test_datagen_manifest_counts_every_record(two_data_dirs):
  (problem, data_dir), _ = two_data_dirs
  manifest = shard_manifest.read(shard_manifest.manifest_path(data_dir, problem.name, "train"))
  (entry,) = manifest["shards"].values()
  assert entry["records"] == problem.split_stats(data_dir, "train")["pairs_written"] == 300


@pytest.fixture
def small_data(tmp_path):
  problem, data_dir = translate_data(tmp_path, "d", 275)
  return problem, data_dir, problem.shard_paths(data_dir, "train")[0]


def test_truncated_shard_is_refused_on_open(small_data):
  problem, data_dir, shard = small_data
  size = os.path.getsize(shard)
  truncate(shard, 0.7)
  with pytest.raises(shard_manifest.ShardError,
                     match=f"{shard}: {int(size * 0.7)} bytes, translate_files-train.manifest.json "
                           f"says {size} .truncated or replaced.; rerun t2t-datagen"):
    problem.dataset("train", data_dir)


def test_flipped_byte_training_ends_with_one_line_naming_the_shard(small_data, tmp_path):
  problem, data_dir, shard = small_data
  flip_byte(shard)
  trainer = make_trainer(tmp_path / "run", steps=4, problem=problem, data_dir=data_dir)
  with pytest.raises(shard_manifest.ShardError, match=f"{shard}: record \\d+ is damaged "
                     r"\(.*corrupted record.*\); rerun t2t-datagen"):
    trainer.train()


def test_datagen_verify_names_the_bad_record_and_rerun_regenerates(small_data):
  problem, data_dir, shard = small_data
  good = open(shard, "rb").read()
  assert shard_manifest.verify_problem(problem, data_dir, ["train", "dev"]) == [
      f"ok {shard}: 300 records", f"ok {problem.shard_paths(data_dir, 'dev')[0]}: 10 records"]
  flip_byte(shard, 0.5)
  proc = run("t2t-datagen", "--problem=translate_files", f"--data_dir={data_dir}", "--verify",
             check=False)
  one_line_error(proc, f"{shard}: record ", "is damaged", "rerun t2t-datagen")
  problem.generate_data(data_dir)  # A rerun: not "already written, skipped".
  assert open(shard, "rb").read() == good


# --- Disk full and one-line errors ------------------------------------------------------

def test_disk_full_at_the_writer_is_one_line_naming_the_path(tmp_path, monkeypatch):
  """ENOSPC injected at the atomic writer (runs everywhere; a real small disk: next test)."""
  trainer = make_trainer(tmp_path / "run", steps=4)

  def full(path, *args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path + files.TEMP_SUFFIX)

  monkeypatch.setattr(files, "atomic_write", full)
  with pytest.raises(OSError) as raised:
    trainer.train()
  line = errors.one_line(raised.value)
  assert line == (f"{tmp_path}/run/ckpt-0.manifest.json.incomplete: No space left on device "
                  "(free some space and rerun: the run resumes from its last checkpoint)")


@pytest.fixture
def small_disk(tmp_path):
  """A 160 KiB tmpfs (real ENOSPC), where this machine lets us mount one."""
  mount = tmp_path / "disk"
  mount.mkdir()
  proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount)],
                        capture_output=True)
  if proc.returncode != 0:
    pytest.skip("cannot mount a tmpfs here; ENOSPC is covered by the patched-writer test")
  yield str(mount)
  subprocess.run(["umount", str(mount)])


def test_disk_full_trainer_datagen_decoder_are_one_line(small_disk, trained, tmp_path):
  proc = run("t2t-trainer", "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
             "--hparams=" + ",".join(f"{k}={v}" for k, v in FAST.items()),
             f"--output_dir={small_disk}/run", "--train_steps=4", check=False)
  one_line_error(proc, f"{small_disk}/run", "No space left on device", "free some space")
  shutil.rmtree(f"{small_disk}/run")
  proc = run("t2t-datagen", "--problem=algorithmic_copy", f"--data_dir={small_disk}/data",
             check=False)
  one_line_error(proc, f"{small_disk}/data/", "No space left on device")
  shutil.rmtree(f"{small_disk}/data")
  with open(f"{small_disk}/filler", "wb") as f:  # Leave the decoder no room at all.
    with pytest.raises(OSError):
      f.write(b"x" * (1 << 20))
  source = tmp_path / "in.txt"
  source.write_text("1 2 3\n")
  proc = run("t2t-decoder", "--problem=algorithmic_copy", f"--output_dir={trained}",
             f"--decode_from_file={source}", f"--decode_to_file={small_disk}/out.txt",
             "--decode_hparams=beam_size=1", check=False)
  one_line_error(proc, f"{small_disk}/out.txt", "No space left on device")


def test_ctrl_c_in_a_command_is_one_line_exit_130(trained):
  """The interactive decoder waits on its input: Ctrl-C there is one line, no traceback."""
  proc = subprocess.Popen(
      command("t2t-decoder") + ["--problem=algorithmic_copy", f"--output_dir={trained}",
                                "--decode_interactive", "--decode_hparams=beam_size=1"],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  proc.stdin.write("1 2 3\n")
  proc.stdin.flush()
  assert proc.stdout.readline().strip()  # Served (an 8-step model), now waiting for more.
  proc.send_signal(signal.SIGINT)
  assert proc.wait(timeout=120) == 130
  err = proc.stderr.read()
  assert err.rstrip().splitlines()[-1].endswith("t2t-decoder: interrupted")
  assert "Traceback" not in err


def test_decode_from_stdin(trained):
  proc = subprocess.run(command("t2t-decoder") + [
      "--problem=algorithmic_copy", f"--output_dir={trained}", "--decode_from_file=-",
      "--decode_hparams=beam_size=1"], input="1 2 3\n\n", capture_output=True, text=True,
      timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert len(proc.stdout.splitlines()) == 2  # One decode per line, on stdout.


@pytest.mark.parametrize("args,fragments", [
    (["t2t-bleu", "--nosuchflag"], ["Unknown command line flag 'nosuchflag'"]),
    (["t2t-bleu", "--translation=X", "--reference=X", "--language=xx"],
     ["--language=xx: not a Moses tokenizer language; use one of ", "de, el, en"]),
    (["t2t-bleu", "--translation=X", "--reference=X", "--output_json=X"],
     ["--output_json=X exists; pass --overwrite to replace it"]),
])
def test_flag_mistakes_are_one_line_exit_2(args, fragments, tmp_path):
  path = tmp_path / "lines.txt"
  path.write_text("a b\n")
  args = [a.replace("=X", f"={path}") for a in args]
  one_line_error(run(*args, check=False), *(f.replace("=X", f"={path}") for f in fragments))


def test_missing_checkpoint_path_is_one_line(trained):
  proc = run("t2t-decoder", "--problem=algorithmic_copy", f"--output_dir={trained}",
             f"--checkpoint_path={trained}/ckpt-200", "--decode_split=dev", check=False)
  one_line_error(proc, f"--checkpoint_path={trained}/ckpt-200: no such checkpoint "
                 "(checkpoints there: ckpt-0, ckpt-4, ckpt-8)")
