"""What defines a run beyond its hparams: seed and data, recorded in run.json and checked.

A resumed run with another `--random_seed` continues different random
streams; a model decoded with another vocabulary (a data_dir generated with
4000 pieces for a model trained on 8000, or `multi30k_enfr` for an
`multi30k_ende` model) produces fluent-looking garbage with exit status 0.
So the trainer records, at the start of a run, the seed and the data the
model's ids mean: the problem, the vocabulary file's name and SHA-256, and
both vocabulary sizes. Resuming compares the seed and the data; the decoder
and `t2t-avg-all` compare the data with the --problem/--data_dir they were
given. A mismatch is one line naming both sides.
"""

import os
from typing import Optional

from absl import logging

from t2tlite import files
from t2tlite.errors import UserError

DATA_KEY = "data"
TOKENS_KEY = "tokens_per_update"  # Recorded at the start; a resume that differs is logged.
# How the run's training stream was built; runs recorded without it had tf.data's autotuning.
PIPELINE_KEY, UNTUNED = "input_pipeline", "untuned"


class RunMismatchError(UserError):
  """The run directory was made with another seed, problem or vocabulary."""


def data_identity(problem, data_dir: Optional[str]) -> dict:
  """{"problem", "vocab_file", "vocab_sha256", "input_vocab_size", "target_vocab_size"}.

  Saved numpy batches (training/numpy_batches.py) carry the identity recorded when they were cut.
  """
  if hasattr(problem, "data_identity"):
    return problem.data_identity()
  inputs, targets = problem.vocab_sizes(data_dir)
  identity = {"problem": problem.name, "input_vocab_size": int(inputs),
              "target_vocab_size": int(targets), "vocab_file": None, "vocab_sha256": None}
  vocab_path = getattr(problem, "vocab_path", None)
  if data_dir and vocab_path and os.path.exists(vocab_path(data_dir)):
    path = vocab_path(data_dir)
    identity.update(vocab_file=os.path.basename(path),
                    vocab_sha256=files.sha256_file(path))
  return identity


def input_tuned(saved: dict) -> bool:
  """Whether a run's training stream runs with tf.data's autotuning: its saved run.json says.

  Runs started before 2026-12-01 (run.json without PIPELINE_KEY) had it, and their
  checkpoints hold that stream's iterator, which an untuned stream cannot restore
  (a resume would skip every checkpoint as damaged); they keep it. New runs, and a
  worker that reads run.json before its chief wrote it, are untuned
  (input_pipeline.without_autotuning).
  """
  return bool(saved) and saved.get(PIPELINE_KEY) != UNTUNED


def check_resume(output_dir: str, saved: dict, current: dict) -> None:
  """Refuses to resume a run recorded with another seed, other data or another backend;
  warns when each update's batch differs from the run's start (another device count)."""
  seed = saved.get("random_seed")
  if seed is not None and seed != current.get("random_seed"):
    raise RunMismatchError(
        f"--random_seed={current.get('random_seed')} but --output_dir={output_dir} was "
        f"started with --random_seed={seed}; rerun with {seed} or use a new --output_dir")
  if saved and current.get("backend"):
    backend = saved.get("backend", "tensorflow")  # Runs recorded before backends: TensorFlow.
    if backend != current["backend"]:
      raise RunMismatchError(
          f"--backend={current['backend']} but --output_dir={output_dir} was trained under "
          f"{backend}, whose optimizer state it holds; resume it with --backend={backend} "
          "(its checkpoints decode under either)")
  if saved.get(DATA_KEY) and current.get(DATA_KEY):
    _compare_data(output_dir, saved[DATA_KEY], current[DATA_KEY], "trained")
  saved_tokens, tokens = saved.get(TOKENS_KEY), current.get(TOKENS_KEY)
  if saved_tokens and tokens and saved_tokens != tokens:
    # Allowed, as tensor2tensor allows resuming on other hardware, but never silent:
    # batch_size is per device, so another device count changes every update's batch.
    logging.warning("--output_dir=%s started with %d target tokens per update; this resume "
                    "trains with %d (batch_size x devices x accumulate_steps): the schedule "
                    "continues, each update's batch changes", output_dir, saved_tokens, tokens)


def check_data(output_dir: str, run_info: dict, hparams, problem, data_dir: Optional[str],
               command: str = "decoded") -> None:
  """Refuses a --problem/--data_dir whose ids mean something else than the run's.

  Runs recorded before the data identity existed are still checked on the
  problem name and on the vocabulary sizes in hparams.json.
  """
  saved_problem = run_info.get("problem")
  if saved_problem and saved_problem != problem.name:
    raise RunMismatchError(f"--problem={problem.name} but --output_dir={output_dir} was "
                           f"trained on {saved_problem}")
  current = data_identity(problem, data_dir)
  saved = run_info.get(DATA_KEY) or {
      "problem": saved_problem or problem.name, "vocab_file": None, "vocab_sha256": None,
      "input_vocab_size": hparams.input_vocab_size,
      "target_vocab_size": hparams.target_vocab_size}
  _compare_data(output_dir, saved, current, command, data_dir)


def _compare_data(output_dir, saved: dict, current: dict, command: str,
                  data_dir: Optional[str] = None) -> None:
  def side(identity):
    vocab = (f"{identity['vocab_file']} (sha256 {identity['vocab_sha256'][:12]}), "
             if identity.get("vocab_sha256") else "")
    return (f"{identity['problem']}, {vocab}vocab sizes {identity['input_vocab_size']}/"
            f"{identity['target_vocab_size']}")

  differ = [k for k in ("problem", "input_vocab_size", "target_vocab_size")
            if saved.get(k) != current.get(k)]
  if saved.get("vocab_sha256") and current.get("vocab_sha256") and (
      saved["vocab_sha256"] != current["vocab_sha256"]):
    differ.append("vocab_sha256")
  if differ:
    given = f"--data_dir={data_dir}" if data_dir else "the data given"
    raise RunMismatchError(
        f"{given} holds {side(current)} but --output_dir={output_dir} was trained on "
        f"{side(saved)}; the run cannot be {command} with this vocabulary")
