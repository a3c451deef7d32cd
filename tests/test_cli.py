"""The commands as a user types them: datagen, trainer, decoder, errors, kill -9 and resume."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.test_param_counts import closed_form_params

TINY = ("--hparams=d_model=32,d_ff=64,num_heads=4,batch_size=512,length_bucket_step=2.0,"
        "learning_rate_warmup_steps=100")


def command(name):
  """The console script installed beside this interpreter (else on PATH, else the module).

  Beside sys.executable first: a PATH that puts another install first would
  otherwise test that install's code.
  """
  beside = os.path.join(os.path.dirname(sys.executable), name)
  path = beside if os.access(beside, os.X_OK) else shutil.which(name)
  module = "t2tlite.bin." + name.replace("-", "_")
  return [path] if path else [sys.executable, "-m", module]


def run(name, *args, check=True, timeout=600):
  proc = subprocess.run(command(name) + list(args), capture_output=True, text=True,
                        timeout=timeout, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  if check and proc.returncode != 0:
    raise AssertionError(f"{name} {args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
  return proc


def one_line_error(proc, *fragments):
  assert proc.returncode == 2, proc.stderr[-2000:]
  errors = [l for l in proc.stderr.splitlines() if ": error: " in l]
  assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  for fragment in fragments:
    assert fragment in errors[0], errors[0]


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
      "--decode_hparams=beam_size=2,alpha=0.6,extra_length=5")
  outputs = open(decoded).read().split("\n")[:-1]
  assert len(outputs) == 41 and outputs[20] == ""
  assert all(len(o.split()) <= len(s.split()) + 5 for o, s in zip(outputs, lines[:20]))

  proc = run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out}",
             f"--decode_from_file={sources}", f"--decode_reference={references}",
             f"--decode_to_file={decoded}", "--decode_hparams=beam_size=1", check=False)
  one_line_error(proc, "--decode_to_file", "exists", "--overwrite")
  proc = run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out}",
             f"--decode_from_file={sources}", f"--decode_reference={references}",
             f"--decode_to_file={decoded}", "--decode_hparams=beam_size=1", "--overwrite")
  scores = json.load(open(decoded + ".scores.json"))
  assert 0.0 <= scores["exact_match"] <= 1.0 and scores["lines"] == 1000
  assert re.search(r"exact_match=[\d.]+ bleu=[\d.]+", proc.stdout)

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


@pytest.mark.slow
def test_kill_minus_9_then_same_command_resumes_on_the_same_step(tmp_path):
  out = str(tmp_path / "run")
  args = command("t2t-trainer") + [
      "--problem=algorithmic_copy", "--hparams_set=transformer_tiny", TINY + ",xla=false",
      f"--output_dir={out}", "--train_steps=60", "--save_checkpoints_steps=5", "--eval_every=0",
      "--eval_steps=1", "--log_every=5", "--eval_decode_lines=4"]
  proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while not os.path.exists(os.path.join(out, "ckpt-10.index")):
    assert proc.poll() is None and time.time() < deadline, "trainer ended before ckpt-10"
    time.sleep(0.2)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  import tensorflow as tf
  killed_at = int(tf.train.latest_checkpoint(out).rsplit("-", 1)[1])
  assert 10 <= killed_at < 60
  resumed = subprocess.run(args, capture_output=True, text=True, timeout=600)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"resuming at step {killed_at}" in resumed.stderr
  first_line = re.search(r"step (\d+)/60 \|", resumed.stderr)
  assert int(first_line.group(1)) == (killed_at // 5 + 1) * 5  # Logging continues after it.
  assert tf.train.latest_checkpoint(out).endswith("ckpt-60")


@pytest.mark.parametrize("name", ["transformer_base", "transformer_big"])
def test_describe_prints_the_closed_form_count(name):
  proc = run("t2t-trainer", f"--hparams_set={name}", "--describe", "--vocab_size=37000")
  count = int(re.search(r"^parameters: (\d+)$", proc.stdout, re.M).group(1))
  from t2tlite import registry
  hp = registry.hparams(name)
  assert count == closed_form_params(hp, 37000)
  assert "encoder_layer_5" in proc.stdout and "decoder_layer_5" in proc.stdout


def test_registry_help_lists_every_kind():
  proc = run("t2t-trainer", "--registry_help")
  for name in ("problems", "hparams sets", "models", "algorithmic_reverse",
               "transformer_base_posemb", "transformer_parsing", "transformer"):
    assert name in proc.stdout


@pytest.mark.parametrize("args,fragments", [
    (["--hparams_set=transformer_bse", "--describe"], ["did you mean transformer_base"]),
    (["--hparams_set=transformer_base", "--hparams=num_heads=x", "--describe"],
     ["--hparams", "num_heads='x' is not a valid int"]),
    (["--hparams_set=transformer_tiny", "--problem=algorithmic_reverse"],
     ["--output_dir is required"]),
    (["--hparams_set=transformer_tiny", "--problem=nope", "--output_dir=/tmp/x"],
     ["unknown problem 'nope'"]),
])
def test_trainer_user_errors_are_one_line(args, fragments):
  one_line_error(run("t2t-trainer", *args, check=False), *fragments)


def test_decoder_without_a_run_is_a_one_line_error(tmp_path):
  one_line_error(run("t2t-decoder", "--problem=algorithmic_reverse",
                     f"--output_dir={tmp_path}", check=False), "no hparams.json")
