"""The one decode pipeline: a problem's source lines in, hypotheses and scores out.

t2t-decoder, the trainer's dev decoding (and the exporter and tests) all call
`decode_lines` (or hold a `DecodePipeline` to decode many times with one set of
compiled searches): text is encoded with the problem's encoders, decoded by
the one compiled search over ids (`Decoder.search_ids`, batched by
`Decoder.decode_nbest`), decoded back to text, rewritten by the problem's
postprocessor (parsing: a tree over the source words), and, given
references, scored with the problem's metrics on the best hypothesis.
"""

import dataclasses
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.decoding.decoder import Decoder


class Hypothesis(NamedTuple):
  text: str  # The decoded (and postprocessed) output line.
  score: float  # log P(Y|X) / lp(|Y|) with beam search; log P(Y|X) greedily.


@dataclasses.dataclass
class Decoded:
  """What one call decoded, in input order."""
  hypotheses: List[List[Hypothesis]]  # Per source, the `beams_written` best, best first; [] if empty.
  lines: List[str]  # Per source, the line t2t-decoder writes (hypotheses tab-separated, scores).
  seconds: float  # Wall time of the decode (tracing and compilation included).
  truncated: int  # Sources cut to the decoder's max_input_length.
  metrics: Optional[Dict[str, float]] = None  # The problem's metrics on `best`, given references.
  postprocess_summary: Optional[str] = None  # E.g. parsing: how many trees were repaired.

  @property
  def best(self) -> List[str]:
    """The best hypothesis of each source ("" for an empty one): what is scored."""
    return [beams[0].text if beams else "" for beams in self.hypotheses]


class DecodePipeline:
  """Decodes text lines of `problem` with `model`; keeps its compiled searches between calls.

  `encoders` ({"inputs": ..., "targets": ...}) default to the problem's,
  read from `data_dir`.
  """

  def __init__(self, problem, model, decode_hparams: DecodeHParams = DecodeHParams(),
               data_dir: Optional[str] = None, encoders: Optional[dict] = None):
    self.problem = problem
    self.encoders = encoders or problem.encoders(data_dir)
    # Parsing constrains the search to well-formed trees (None for other problems).
    self.decoder = Decoder(model, decode_hparams,
                           problem.decode_constraint(decode_hparams, self.encoders))

  @property
  def hparams(self) -> DecodeHParams:
    return self.decoder.hparams

  def decode(self, source_lines: Sequence[str], references: Optional[Sequence[str]] = None,
             progress: Optional[Callable[[int], object]] = None) -> Decoded:
    """Decodes every line (an empty line decodes to an empty line), in input order.

    `progress(lines done)` is called after each batch, e.g.
    `t2tlite.progress.Progress.update`.
    """
    start = time.perf_counter()
    sources = self._encode(source_lines)
    return self._decoded(source_lines, self.decoder.decode_nbest(sources, progress), references,
                         start)

  def decode_per_alpha(self, source_lines: Sequence[str], alphas: Sequence[float],
                       references: Optional[Sequence[str]] = None,
                       progress: Optional[Callable[[int], object]] = None) -> List[Decoded]:
    """`decode` at each of `alphas`, from one search per batch (Decoder.decode_nbest_per_alpha).

    Each Decoded is what `decode` gives with that alpha; `seconds` is the shared search's.
    """
    start = time.perf_counter()
    sources = self._encode(source_lines)
    per_alpha = self.decoder.decode_nbest_per_alpha(sources, alphas, progress)
    seconds = time.perf_counter() - start
    return [self._decoded(source_lines, nbest, references, start, seconds)
            for nbest in per_alpha]

  def _encode(self, source_lines: Sequence[str]) -> List[List[int]]:
    encoder = self.encoders["inputs"]
    return [encoder.encode(line) if line.strip() else [] for line in source_lines]

  def _decoded(self, source_lines, nbest, references, start: float,
               seconds: Optional[float] = None) -> Decoded:
    """The search's (ids, score) beams -> text, lines to write and, given references, metrics.

    `seconds`: the decode's wall time, when given; else the time since `start`.
    """
    hp = self.hparams
    target_encoder = self.encoders["targets"]
    postprocess = self.problem.decode_postprocessor(hp)
    hypotheses, lines = [], []
    for line, beams in zip(source_lines, nbest):
      texts = [target_encoder.decode(ids) for ids, _ in beams]
      hyps = [Hypothesis(postprocess(line, text) if postprocess else text, score)
              for text, (_, score) in zip(texts, beams)]
      hypotheses.append(hyps)
      fields = []
      for hyp in hyps:
        fields.append(hyp.text)
        if hp.write_beam_scores:
          fields.append(f"{hyp.score:.4f}")
      lines.append("\t".join(fields))
    if seconds is None:
      seconds = time.perf_counter() - start
    decoded = Decoded(hypotheses=hypotheses, lines=lines, seconds=seconds,
                      truncated=self.decoder.truncated,
                      postprocess_summary=(postprocess.summary()
                                           if hasattr(postprocess, "summary") else None))
    if references is not None:
      from t2tlite.metrics import scoring
      decoded.metrics = scoring.score(decoded.best, references, self.problem.eval_metrics)
    return decoded


def decode_lines(problem, model, decode_hparams: DecodeHParams, source_lines: Sequence[str],
                 references: Optional[Sequence[str]] = None, data_dir: Optional[str] = None,
                 encoders: Optional[dict] = None) -> Decoded:
  """One call: `DecodePipeline(problem, model, decode_hparams, ...).decode(source_lines, ...)`."""
  return DecodePipeline(problem, model, decode_hparams, data_dir, encoders).decode(
      source_lines, references)
