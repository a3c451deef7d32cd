"""The commands as a user types them: datagen, trainer, decoder, errors, kill -9 and resume."""

import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.helpers import (IMPORT_LOG, TINY, closed_form_params, command, greedy_by_recomputation,
                           one_line_error, registry_sections, run, tensorflow_imported)


@pytest.mark.slow
def test_datagen_train_decode_end_to_end(tmp_path):
  data, out = str(tmp_path / "data"), str(tmp_path / "run")
  run("t2t-datagen", "--problem=algorithmic_reverse", f"--data_dir={data}")
  proc = run("t2t-trainer", "--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
             TINY, f"--data_dir={data}", f"--output_dir={out}", "--train_steps=30",
             "--eval_every=15", "--eval_steps=2", "--log_every=10", "--eval_decode_lines=10",
             "--save_checkpoints_steps=15")
  assert re.search(r"step 30/30 \| loss [\d.]+ nll [\d.]+ ppl [\d.]+ .* tok/s .* ETA", proc.stderr)
  assert os.path.exists(os.path.join(out, "ckpt-30.index"))
  saved = json.load(open(os.path.join(out, "hparams.json")))
  assert saved["d_model"] == 32 and saved["target_vocab_size"] == 12 and saved["xla"]

  sources = os.path.join(data, "algorithmic_reverse-test.inputs")
  references = os.path.join(data, "algorithmic_reverse-test.targets")
  with open(sources) as f:
    lines = f.read().splitlines()[:40]
  subset = tmp_path / "subset.inputs"
  subset.write_text("\n".join(lines[:20] + [""] + lines[20:]) + "\n")  # An empty line inside.
  decoded = str(tmp_path / "decoded.txt")
  run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out}",
      f"--decode_from_file={subset}", f"--decode_to_file={decoded}",
      "--decode_hparams=beam_size=1,extra_length=5")
  outputs = open(decoded).read().split("\n")[:-1]
  assert len(outputs) == 41 and outputs[20] == ""
  # Each line is the greedy decode of its own source (order kept around the empty line),
  # as recomputing the whole model at every step, with no cache and no search, finds it.
  assert outputs[:20] + outputs[21:] == greedy_decodes(out, lines, extra_length=5)

  proc = run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out}",
             f"--decode_from_file={sources}", f"--decode_reference={references}",
             f"--decode_to_file={decoded}", "--decode_hparams=beam_size=1", check=False)
  one_line_error(proc, "--decode_to_file", "exists", "--overwrite")
  proc = run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out}",
             f"--decode_from_file={sources}", f"--decode_reference={references}",
             f"--decode_to_file={decoded}", "--decode_hparams=beam_size=1", "--overwrite")
  scores = json.load(open(decoded + ".scores.json"))
  hypotheses = open(decoded).read().splitlines()
  targets = open(references).read().splitlines()
  assert scores["lines"] == 1000 == len(hypotheses)
  assert scores["exact_match"] == pytest.approx(
      np.mean([h == t for h, t in zip(hypotheses, targets)]))
  assert re.search(r"exact_match=[\d.]+ bleu=[\d.]+", proc.stdout)
  # A 30-step model gets few right: score it against references half of which are its own
  # decodes, so exact match is at least 0.5 and a wrong count shows.
  mixed = tmp_path / "mixed.targets"
  mixed.write_text("".join((h if i % 2 else t) + "\n"
                           for i, (h, t) in enumerate(zip(hypotheses, targets))))
  run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out}",
      f"--decode_from_file={sources}", f"--decode_reference={mixed}",
      f"--decode_to_file={decoded}", "--decode_hparams=beam_size=1", "--overwrite")
  expected = (500 + sum(h == t for h, t in zip(hypotheses[::2], targets[::2]))) / 1000
  assert json.load(open(decoded + ".scores.json"))["exact_match"] == pytest.approx(expected)

  png = tmp_path / "curves.png"
  proc = run("t2t-plot-curves", f"--output_dir={out}", f"--png={png}", "--csv")
  assert "train/loss, eval/loss, eval/bleu" in proc.stdout
  rows = open(f"{tmp_path}/curves.run.eval.exact_match.csv").read().split()
  assert rows[0] == "step,value" and [r.split(",")[0] for r in rows[1:]] == ["15", "30"]

  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"1 2 3\n4 \xff 5\n")
  one_line_error(run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out}",
                     f"--decode_from_file={bad}", f"--decode_to_file={tmp_path / 'x'}",
                     check=False), "line 2 is not valid UTF-8")


# Slow-marked (two trainer runs each, 50 s in CI): CI sends SIGTERM to a t2t-trainer in
# test_distribute.py's signal test (exit 143, the step in flight saved, the same command
# resumes from it), to an in-process Trainer in test_faults.py (saved, resumed), and checks
# both signals' handler below (test_stop_signals_...) and Ctrl-C's one line (test_faults.py).
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_saves_the_step_in_flight_and_the_same_command_resumes(tmp_path,
                                                                                  signum):
  out = str(tmp_path / "run")
  args = command("t2t-trainer") + [
      "--problem=algorithmic_copy", "--hparams_set=transformer_tiny", TINY + ",xla=false",
      f"--output_dir={out}", "--train_steps=100000", "--save_checkpoints_steps=100000",
      "--eval_every=0", "--eval_steps=1", "--log_every=1", "--eval_decode_lines=4"]
  # As from a terminal: SIGINT at its default, even where this test runs as a background
  # job of a non-interactive shell (whose children start with SIGINT ignored).
  proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  seen = []
  for line in proc.stderr:  # Until training runs: "step N/100000 |" lines.
    seen.append(line)
    if re.search(r"step (\d+)/100000 \|", line) and int(re.search(
        r"step (\d+)/", line).group(1)) >= 3:
      break
  assert proc.poll() is None, "".join(seen[-20:])
  proc.send_signal(signum)
  rest = proc.stderr.read()
  assert proc.wait(timeout=300) == 128 + signum, rest[-3000:]
  stopped = re.search(r"t2t-trainer: stopped by SIG(INT|TERM) at step (\d+), saved (\S+): "
                      r"the same command resumes from it\n$", rest)
  assert stopped, rest[-3000:]
  assert "Traceback" not in rest
  step = int(stopped.group(2))
  assert step >= 3 and stopped.group(3) == os.path.join(out, f"ckpt-{step}")
  assert os.path.exists(os.path.join(out, f"ckpt-{step}.manifest.json"))  # Complete.
  # Neither evaluated nor averaged on the way out; the same command resumes there.
  assert "eval step" not in rest
  resumed = subprocess.run([a.replace("--train_steps=100000", f"--train_steps={step + 2}")
                            for a in args], capture_output=True, text=True, timeout=600)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"resuming at step {step}" in resumed.stderr
  assert os.path.exists(os.path.join(out, f"ckpt-{step + 2}.index"))


def test_stop_signals_first_asks_second_acts_as_before_ignored_stays_ignored():
  from t2tlite.training.stop_signals import StopSignals
  before = signal.getsignal(signal.SIGTERM)
  with StopSignals() as stops:
    assert stops.received is None
    # raise_signal: in this thread, the Python handler run before it returns (os.kill may land
    # on one of TensorFlow's threads, and the handler then runs whenever the main thread looks).
    signal.raise_signal(signal.SIGTERM)
    assert stops.received == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before  # A second SIGTERM would kill.
  ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    with StopSignals() as stops:
      signal.raise_signal(signal.SIGINT)
      assert stops.received is None  # Started ignored: stays ignored.
  finally:
    signal.signal(signal.SIGINT, ignored)
  assert signal.getsignal(signal.SIGTERM) == before



def test_stop_check_acts_on_what_the_workers_agreed_and_stays_stopped():
  """With an agreement (several workers), this process's own signal counts only once
  shared, another worker's counts though this process saw none, the chief's verdicts are
  the agreed ones, and a stop is final: no further collective call. Without one, the own
  signal, early stopping or the clock ends the loop; early stopping is checked first."""
  from t2tlite.training.stop_signals import StopCheck, StopSignals
  shared = []

  def agreement(signum, out_of_patience, out_of_time):  # Worker 1 gets SIGTERM after step 1.
    shared.append((signum, out_of_patience, out_of_time))
    return (signal.SIGTERM if len(shared) >= 2 else None), False, False
  # As from a terminal: a background job of a non-interactive shell starts with SIGINT
  # ignored, and StopSignals rightly leaves an ignored signal ignored.
  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    with StopSignals() as stops:
      check = StopCheck(stops, lambda: False, lambda: False, agreement)
      assert not check.now() and check.signal is None
      signal.raise_signal(signal.SIGINT)
      assert stops.received == signal.SIGINT and not check.signalled()  # Not yet shared.
      assert check.now() and check.signal == signal.SIGTERM
      assert check.now() and shared == [(None, False, False), (signal.SIGINT, False, False)]
  finally:
    signal.signal(signal.SIGINT, before)
  with StopSignals() as stops:  # A non-chief worker: the chief's clock, agreed.
    check = StopCheck(stops, lambda: False, lambda: False, lambda s, p, t: (None, False, True))
    assert check.now() and check.out_of_time and not check.out_of_patience
  with StopSignals() as stops:
    clock = iter([False, True])
    check = StopCheck(stops, lambda: False, lambda: next(clock))
    assert not check.now() and check.now() and check.now() and check.signal is None
    assert check.out_of_time
    signal.raise_signal(signal.SIGTERM)
    assert check.signal == signal.SIGTERM
  with StopSignals() as stops:
    check = StopCheck(stops, lambda: True, lambda: pytest.fail("the clock read"))
    assert check.now() and check.out_of_patience and not check.out_of_time

def test_kill_minus_9_then_same_command_resumes_on_the_same_step(tmp_path):
  out = str(tmp_path / "run")
  args = command("t2t-trainer") + [
      "--problem=algorithmic_copy", "--hparams_set=transformer_tiny", TINY + ",xla=false",
      f"--output_dir={out}", "--train_steps=30", "--save_checkpoints_steps=5", "--eval_every=0",
      "--eval_steps=1", "--log_every=5", "--eval_decode_lines=4"]
  proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  # The manifest is written last, once ckpt-10 and the checkpoint state file are complete.
  while not os.path.exists(os.path.join(out, "ckpt-10.manifest.json")):
    assert proc.poll() is None and time.time() < deadline, "trainer ended before ckpt-10"
    time.sleep(0.2)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  import tensorflow as tf
  # The newest checkpoint whose index TensorFlow wrote (its last file), read from the files, not
  # from the state file: that is updated after them, so a kill between the two leaves it one
  # save behind, and the resume rightly takes the newer checkpoint.
  killed_at = max(int(m.group(1)) for m in map(re.compile(r"ckpt-(\d+)\.index").fullmatch,
                                               os.listdir(out)) if m)
  assert 10 <= killed_at < 30
  resumed = subprocess.run(args, capture_output=True, text=True, timeout=600)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"resuming at step {killed_at}" in resumed.stderr
  # Its events read back and a checkpoint saved every 5 steps, without TensorFlow's lines
  # about either (a deprecated reader, the saver's sharding time).
  assert "deprecat" not in resumed.stderr and "Sharding callback" not in resumed.stderr
  # absl still names the file that logged each line (its logger class is absl's own).
  assert re.search(r"trainer\.py:\d+\] restored \S+: resuming at step", resumed.stderr)
  first_line = re.search(r"step (\d+)/30 \|", resumed.stderr)
  assert int(first_line.group(1)) == (killed_at // 5 + 1) * 5  # Logging continues after it.
  assert tf.train.latest_checkpoint(out).endswith("ckpt-30")


def test_describe_prints_the_closed_form_count():
  """The command prints the built model's count (every set's count: test_param_counts.py)."""
  name = "transformer_big"
  proc = run("t2t-trainer", f"--hparams_set={name}", "--describe", "--vocab_size=37000")
  count = int(re.search(r"^parameters: (\d+)$", proc.stdout, re.M).group(1))
  from t2tlite import registry
  hp = registry.hparams(name)
  assert count == closed_form_params(hp, 37000)
  assert "encoder_layer_5" in proc.stdout and "decoder_layer_5" in proc.stdout


def test_registry_help_lists_every_kind():
  sections = registry_sections(run("t2t-trainer", "--registry_help").stdout)
  assert {"algorithmic_reverse", "algorithmic_copy", "ptb_sample"} <= set(sections["problems"])
  assert {"transformer_base_posemb", "transformer_parsing", "transformer_tiny"} <= set(
      sections["hparams sets"])
  assert "transformer" in sections["models"]
  assert "transformer" not in sections["hparams sets"]  # Each name under its own kind.
  assert "algorithmic_reverse" not in sections["hparams sets"] + sections["models"]


def greedy_decodes(output_dir, lines, extra_length):
  """Each line's greedy decode by the run's model, recomputed whole for every prefix."""
  from t2tlite import registry
  from t2tlite.training import run_dir
  model, _ = run_dir.load_model(output_dir, hparams_overrides="xla=false")
  encoders = registry.problem("algorithmic_reverse").encoders()
  return [encoders["targets"].decode(greedy_by_recomputation(
      [model], encoders["inputs"].encode(line), extra_length)[0]) for line in lines]


@pytest.mark.parametrize("args,fragments,loads_tensorflow", [
    (["--hparams_set=transformer_bse", "--describe"], ["did you mean transformer_base"], False),
    (["--hparams_set=transformer_base", "--hparams=num_heads=x", "--describe"],
     ["--hparams", "num_heads='x' is not a valid int"], False),
    (["--hparams_set=transformer_tiny", "--problem=algorithmic_reverse"],
     ["--output_dir is required"], False),
    # The problems are registered as they load, and they load TensorFlow.
    (["--hparams_set=transformer_tiny", "--problem=nope", "--output_dir=/tmp/x"],
     ["unknown problem 'nope'"], True),
])
def test_trainer_user_errors_are_one_line(args, fragments, loads_tensorflow):
  """Each is one line; a mistake in the sets, hparams or flags, before TensorFlow loads."""
  proc = run("t2t-trainer", *args, check=False, env=IMPORT_LOG)
  one_line_error(proc, *fragments)
  assert tensorflow_imported(proc) == loads_tensorflow


@pytest.mark.parametrize("args,fragment", [
    ([], "--data_dir is required"),
    (["--data_dir=DATA", "--numpy_batches=BATCHES", "--hparams_set=transformer_tiny",
      "--numpy_steps=0"], "--numpy_steps=0 and --numpy_devices=1 must be >= 1"),
    (["--data_dir=DATA", "--numpy_batches=BATCHES", "--hparams_set=transformer_tny"],
     "did you mean transformer_tiny"),
])
def test_datagen_flag_mistakes_are_one_line_before_tensorflow_and_write_nothing(
    args, fragment, tmp_path):
  args = [a.replace("=DATA", f"={tmp_path}/data").replace("=BATCHES", f"={tmp_path}/batches")
          for a in args]
  proc = run("t2t-datagen", "--problem=algorithmic_copy", *args, check=False, env=IMPORT_LOG)
  one_line_error(proc, fragment)
  assert not tensorflow_imported(proc)
  assert os.listdir(tmp_path) == []


def test_decoder_without_a_run_is_a_one_line_error_before_tensorflow(tmp_path):
  proc = run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={tmp_path}",
             check=False, env=IMPORT_LOG)
  one_line_error(proc, "no hparams.json")
  assert not tensorflow_imported(proc)
