"""Decoding settings (`--decode_hparams`): the paper's Section 6.1 by default."""

import dataclasses

from t2tlite import overrides, xla_choice

SAMPLING_METHODS = ("argmax", "random")


@dataclasses.dataclass(frozen=True)
class DecodeHParams:
  beam_size: int = 4  # Beams per sentence; 1 decodes greedily.
  alpha: float = 0.6  # GNMT length-penalty exponent: score = log P / ((5 + |Y|) / 6)^alpha.
  extra_length: int = 50  # Maximum output length = input length + extra_length.
  batch_size: int = 64  # At most this many sentences per batch (sorted by length first).
  batch_tokens: int = 4096  # Token budget per batch: sentences x padded source length (0: no budget).
  length_multiple: int = 8  # Source lengths are padded to a multiple of this, bounding recompilation.
  concurrent_batches: int = 0  # Batches searched at once, one thread each; 0: one per usable CPU core on a CPU, 1 on an accelerator. Outputs do not depend on it (bench/README.md: translation 1.13-1.15x, beam-21 parsing 1.0x).
  pad_batch_rows: bool = True  # Fill a batch with empty rows up to the most its width allows: one compiled shape per width (a call's last batch pads only onto a compiled shape).
  max_input_length: int = 0  # Longer sources are truncated, with a warning; 0: the model's hparams.max_length.
  return_beams: bool = False  # Write every beam of a sentence on its line, tab-separated, best first.
  nbest: int = 0  # Write the N best beams (<= beam_size) like return_beams; 0: only the best.
  write_beam_scores: bool = False  # After each written hypothesis, a tab and its score (log P / lp).
  use_cache: bool = True  # Incremental key/value cache; false recomputes the decoder each step (reference/baseline).
  constrain_trees: bool = False  # Parsing: only tokens that keep the output a well-formed tree over the source words (tree_constraint.py).
  tree_max_depth: int = 64  # With constrain_trees: most constituents open at once (the sample's trees reach 27).
  tree_max_open_run: int = 6  # With constrain_trees: most opening brackets in a row before a word (the sample's train trees reach 6); 0: no bound.
  tree_no_unary_repeat: bool = False  # With constrain_trees: no constituent whose only child has its label, (NP (NP ..)NP )NP (21 in the 3396 train trees; off: no dev gain, 50.84 vs 51.22).
  tree_collapse_unary_repeat: bool = True  # Parsing: merge a constituent into a same-label parent it is the only child of, (NP (NP ..)NP )NP -> (NP ..)NP (trees.collapse_unary_repeats; chosen on dev: F1 56.18 vs 51.22).
  sampling_method: str = "argmax"  # argmax, or random: draw each token (sampling.py); random needs beam_size=1 (tensor2tensor's).
  sampling_temp: float = 1.0  # With random: log-probs divided by this; 0 is argmax (tensor2tensor's default 1.0).
  sampling_topk: int = 0  # With random: draw among the k most likely tokens; 0: all (fairseq's --sampling-topk).
  sampling_seed: int = 1  # With random: the same seed gives the same sample of a sentence, however it is batched.
  xla: str = "auto"  # Compile the search: auto follows the run's xla hparam (compiled unless "false"); true/false override it.
  xla_opt_level: int = 0  # XLA's backend optimization level (1-3) on a CPU for the whole process, set before the model loads (xla_choice.request_backend_level); 0: XLA's default (3).

  def __post_init__(self):
    object.__setattr__(self, "xla", xla_choice.normalize(self.xla))
    if self.xla not in xla_choice.CHOICES:
      raise overrides.OverrideError(
          f"--decode_hparams: xla={self.xla!r} must be one of {', '.join(xla_choice.CHOICES)}")
    if not 0 <= self.xla_opt_level <= 3:
      raise overrides.OverrideError(
          f"--decode_hparams: xla_opt_level={self.xla_opt_level} must be 0 (XLA's default) to 3")
    for name in ("beam_size", "batch_size", "length_multiple", "tree_max_depth"):
      if getattr(self, name) < 1:
        raise overrides.OverrideError(f"--decode_hparams: {name}={getattr(self, name)} must be >= 1")
    if self.nbest > self.beam_size:
      raise overrides.OverrideError(
          f"--decode_hparams: nbest={self.nbest} exceeds beam_size={self.beam_size}")
    for name in ("extra_length", "batch_tokens", "concurrent_batches", "max_input_length",
                 "nbest", "tree_max_open_run"):
      if getattr(self, name) < 0:
        raise overrides.OverrideError(
            f"--decode_hparams: {name}={getattr(self, name)} must be >= 0")
    if self.sampling_method not in SAMPLING_METHODS:
      raise overrides.OverrideError(
          f"--decode_hparams: sampling_method={self.sampling_method!r} must be one of "
          f"{', '.join(SAMPLING_METHODS)}")
    if self.sampling_temp < 0 or self.sampling_topk < 0:
      raise overrides.OverrideError(
          f"--decode_hparams: sampling_temp={self.sampling_temp} and sampling_topk="
          f"{self.sampling_topk} must be >= 0")
    if self.sampling_method == "random" and self.beam_size != 1:
      raise overrides.OverrideError(
          f"--decode_hparams: sampling_method=random draws one hypothesis per sentence; "
          f"add beam_size=1 (got beam_size={self.beam_size})")

  @property
  def samples(self) -> bool:
    """Whether tokens are drawn rather than ranked (random at a temperature above 0)."""
    return self.sampling_method == "random" and self.sampling_temp > 0

  def rows_for_width(self, width: int) -> int:
    """Most sentences a batch of padded source width `width` may hold."""
    if self.batch_tokens:
      return max(1, min(self.batch_size, self.batch_tokens // width))
    return self.batch_size

  @property
  def beams_written(self) -> int:
    """Hypotheses written per sentence."""
    return self.beam_size if self.return_beams else max(self.nbest, 1)

  def override(self, text: str, flag: str = "--decode_hparams") -> "DecodeHParams":
    return overrides.apply_overrides(self, text, flag)
