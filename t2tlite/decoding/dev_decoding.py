"""The trainer's real decoding of dev: eval/bleu, eval/exact_match, eval/parse_f1, ...

Training does not import decoding: decoding loads runs through training/
(run_dir, averaging), so an import the other way would run back up. The command
that trains (bin/t2t_trainer.py) builds a `DevDecoding` and hands it to the
Trainer, which calls it with its model at each evaluation that decodes.
"""

from typing import Callable, Optional

from absl import logging

from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.decoding.pipeline import DecodePipeline


class _Abandoned(Exception):
  """Raised between decode batches once the trainer is asked to stop."""


class DevDecoding:
  """model -> the problem's decoded dev metrics; the pipeline is built at the first call."""

  def __init__(self, problem, data_dir: Optional[str], decode_hparams: str = "",
               lines: int = 0):
    """decode_hparams: --eval_decode_hparams over the problem's own; lines: 0 = all of dev."""
    self.problem, self.data_dir, self.lines = problem, data_dir, lines
    self.hparams = DecodeHParams().override(problem.default_decode_hparams).override(
        decode_hparams, "--eval_decode_hparams")  # Bad hparams fail before training starts.
    self.pipeline = None
    self._text = None

  @classmethod
  def from_options(cls, problem, data_dir: Optional[str], options) -> "DevDecoding":
    """From a training.options.TrainOptions: its eval_decode_hparams and eval_decode_lines."""
    return cls(problem, data_dir, options.eval_decode_hparams, options.eval_decode_lines)

  def __call__(self, model, stopping: Optional[Callable[[], bool]] = None) -> Optional[dict]:
    """The metrics; None where `stopping()` turned true between two decode batches.

    A stop signal then ends the decode after the batches already searching, not after
    all of dev (Trainer.evaluate abandons the evaluation; the resumed run redoes it).
    """
    if self.pipeline is None:
      self.pipeline = DecodePipeline(self.problem, model, self.hparams, self.data_dir)
      sources, references = self.problem.eval_text("dev", self.data_dir)
      if self.lines:
        sources, references = sources[:self.lines], references[:self.lines]
      self._text = (sources, references)
    sources, references = self._text

    def stop_if_asked(_lines_done):
      if stopping is not None and stopping():
        raise _Abandoned()
    try:
      decoded = self.pipeline.decode(sources, references, progress=stop_if_asked)
    except _Abandoned:
      return None
    if decoded.postprocess_summary:
      logging.info("dev decodes: %s", decoded.postprocess_summary)
    logging.info("decoded %d dev sentences in %.1f s (%d batch shapes so far): %s", len(sources),
                 decoded.seconds, len(self.pipeline.decoder.shapes_seen),
                 " ".join(f"{k} {v:.4f}" for k, v in decoded.metrics.items()))
    return decoded.metrics
