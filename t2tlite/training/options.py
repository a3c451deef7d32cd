"""The training loop's settings: one definition for the record and the t2t-trainer flags.

Each field of `TrainOptions` is a t2t-trainer flag: its default and help text
are written once here, `define_flags` turns the fields into absl flags and
`from_flags` reads them back, so the command and a library caller of
`Trainer` get the same defaults (the paper's 100k steps, not a hand-kept
mirror) and the same checks (`TrainOptions.__post_init__`).

No TensorFlow and no keras here: the command validates its flags (and picks
the Keras backend, --backend) before either loads.
"""

import dataclasses
from typing import Any

from t2tlite import backends
from t2tlite.errors import UserError


class TrainOptionsError(UserError):
  """A training option out of range; the line names the flag and the value."""


# --keep_best's metrics (keep_best.METRICS says which way is better; kept here without imports).
KEEP_BEST_METRICS = ("bleu", "loss", "parse_f1", "exact_match", "nll", "perplexity")
# ...of which only decoding dev measures these: TensorFlow only (beam search is TensorFlow's).
DECODED_METRICS = ("bleu", "parse_f1", "exact_match")


def check_keep_best_backend(keep_best: str, backend: str) -> None:
  """A --keep_best metric the backend can measure: the decoded ones need TensorFlow.

  Checked with the flags (--backend) and again by the trainer with the backend
  actually chosen ($KERAS_BACKEND when --backend is empty).
  """
  if backend == backends.JAX and keep_best in DECODED_METRICS:
    raise TrainOptionsError(
        f"--keep_best={keep_best} is measured by decoding dev, which runs under "
        "TensorFlow only; under --backend=jax keep the best by loss, nll or perplexity")


def _option(default: Any, help_text: str):
  """A field that is also a flag: its default and help text, once."""
  return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass(frozen=True)
class TrainOptions:
  """Loop settings that do not change the model (the t2t-trainer flags)."""
  train_steps: int = _option(100000, "Total optimizer updates (paper base: 100k).")
  train_seconds: int = _option(
      0, "Also stop once training has taken this many seconds of wall time, resumes included "
      "(0: no limit; several workers follow the chief's clock); the last step is checkpointed.")
  eval_every: int = _option(1000, "Evaluate on dev every N steps (0: at the end only).")
  eval_steps: int = _option(0, "Dev batches per evaluation (0: all of dev).")
  save_checkpoints_steps: int = _option(1000, "Checkpoint every N steps.")
  save_checkpoints_secs: int = _option(
      600, "...or every N seconds, whichever comes first (paper: 10 minutes).")
  keep_checkpoint_max: int = _option(
      20, "Checkpoints to keep (at least 1: training resumes from the last; 20 covers the big "
      "model's averaging).")
  average_last_n: int = _option(
      0, "Average the last N checkpoints into <output_dir>/averaged/ at the end of training "
      "(0: off; paper: 5 base, 20 big).")
  average_best_n: int = _option(
      0, "Keep the N best checkpoints by the --keep_best dev metric in <output_dir>/best/ and "
      "average them into <output_dir>/averaged_best/ at the end of training (0: off; not the "
      "paper, which averages the last N: for a run that over-fits before its budget ends).")
  eval_decode: bool = _option(
      True, "At each evaluation also decode dev for real (beam search) and log BLEU / exact "
      "match to TensorBoard.")
  eval_decode_lines: int = _option(0, "Dev sentences decoded per evaluation (0: all).")
  eval_decode_hparams: str = _option(
      "", "--decode_hparams for the dev decodes (default: the problem's, beam 4).")
  attention_summaries: bool = _option(
      True, "At each evaluation log the attention heatmaps (every layer x head, each attention "
      "kind) of the first dev sentence to TensorBoard as attention/* images (one forward "
      "pass of one sentence).")
  log_every: int = _option(100, "Steps between progress lines and summaries.")
  random_seed: int = _option(1, "Seed for initialisation, dropout and shuffling.")
  overwrite_run: bool = _option(
      False, "Start over in an --output_dir that holds a run: its files are moved into "
      "<output_dir>/previous-N/, not deleted.")
  warm_start_from: str = _option(
      "", "Start a new run from the weights of this checkpoint (or the newest in this run "
      "directory), matched by Keras path; the optimizer and step start afresh. Ignored when "
      "--output_dir already holds a checkpoint (that run resumes).")
  warm_start_skip_embeddings: bool = _option(
      False, "With --warm_start_from: leave the vocabulary-sized weights (embeddings, softmax) "
      "at their initial values, for a run with another vocabulary.")
  keep_best: str = _option(
      "", "Keep the weights of the best evaluation (with --average_best_n=N: the N best) by this "
      f"dev metric in <output_dir>/best/ (one of {', '.join(KEEP_BEST_METRICS)}; never rotated "
      "away). Empty: off.")
  early_stopping_patience: int = _option(
      0, "Stop after this many evaluations in a row without a better --keep_best metric "
      "(0: never; several workers follow the chief's dev evaluation).")
  backend: str = _option(
      "", "Keras backend to train on: tensorflow or jax (empty: $KERAS_BACKEND, else "
      "tensorflow). Under jax the same model, loss, optimizer and data train in a jax.jit step "
      "and the checkpoints are the same files; dev is not decoded during training (beam search "
      "is TensorFlow's; decode the checkpoints with t2t-decoder).")

  def __post_init__(self):
    for name, low in _AT_LEAST.items():
      value = getattr(self, name)
      if value < low:
        meaning = " (0: off)" if low == 0 else ""
        raise TrainOptionsError(f"--{name}={value}: must be >= {low}{meaning}")
    if self.keep_best and self.keep_best not in KEEP_BEST_METRICS:
      raise TrainOptionsError(f"--keep_best={self.keep_best}: must be one of "
                              f"{', '.join(KEEP_BEST_METRICS)}")
    if self.early_stopping_patience and not self.keep_best:
      raise TrainOptionsError(f"--early_stopping_patience={self.early_stopping_patience}: "
                              "needs --keep_best=METRIC, the dev metric it watches")
    if self.average_best_n and not self.keep_best:
      raise TrainOptionsError(f"--average_best_n={self.average_best_n}: needs "
                              "--keep_best=METRIC, the dev metric that ranks the checkpoints")
    if self.average_best_n and not self.eval_every:
      raise TrainOptionsError(f"--average_best_n={self.average_best_n}: needs --eval_every > 0 "
                              "(with 0, dev is evaluated at the end only)")
    if self.early_stopping_patience and not self.eval_every:
      raise TrainOptionsError(f"--early_stopping_patience={self.early_stopping_patience}: "
                              "needs --eval_every > 0 (with 0, dev is evaluated at the end only)")
    backends.check_choice(self.backend)
    check_keep_best_backend(self.keep_best, self.backend)
    if self.warm_start_skip_embeddings and not self.warm_start_from:
      raise TrainOptionsError("--warm_start_skip_embeddings: needs --warm_start_from")


# The one place the options' ranges are checked, for the flags and for library callers alike.
_AT_LEAST = {"train_steps": 0, "train_seconds": 0, "eval_every": 0, "eval_steps": 0,
             "save_checkpoints_steps": 1, "save_checkpoints_secs": 0, "keep_checkpoint_max": 1,
             "average_last_n": 0, "average_best_n": 0, "eval_decode_lines": 0, "log_every": 1,
             "early_stopping_patience": 0}


def define_flags(flag_values=None) -> None:
  """Defines one absl flag per field, with the field's default and help text."""
  from absl import flags
  flag_values = flags.FLAGS if flag_values is None else flag_values
  define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, str: flags.DEFINE_string}
  for field in dataclasses.fields(TrainOptions):
    define[field.type](field.name, field.default, field.metadata["help"],
                       flag_values=flag_values)


def from_flags(flag_values=None) -> TrainOptions:
  """The options the flags `define_flags` defined hold, validated."""
  from absl import flags
  flag_values = flags.FLAGS if flag_values is None else flag_values
  return TrainOptions(**{f.name: getattr(flag_values, f.name)
                         for f in dataclasses.fields(TrainOptions)})
