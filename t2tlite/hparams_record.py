"""The one typed hyper-parameter record every model, trainer and set shares.

The registered sets (t2tlite.hparams, the top-level hparams/ folder) are
functions returning this record; it lives in the core so that models,
training and the commands depend only on the core.

Defaults are the paper's base model (Vaswani et al. 2017, Section 3 and 5),
so `transformer_base` is `HParams()` and every other set names only what it
changes. Where tensor2tensor departs from the paper the default stays the
paper's and the departure is a named value (e.g. `layer_norm_position="pre"`).
Invalid combinations fail at construction with one line naming the field.
"""

import dataclasses
import json

from t2tlite import files, overrides, xla_choice
from t2tlite.errors import UserError

_CHOICES = {
    "layer_norm_position": ("post", "pre"),
    "position_encoding": ("sinusoid", "learned"),
    "ffn_activation": ("relu", "gelu"),
    "learning_rate_schedule": ("noam", "constant"),
    "dtype": ("float32", "mixed_bfloat16", "mixed_float16"),
    "xla": xla_choice.CHOICES,
}


class HParamsError(UserError):
  """An invalid hyper-parameter value; one line naming the field."""


@dataclasses.dataclass(frozen=True)
class HParams:
  # --- Architecture (Section 3) ---
  num_encoder_layers: int = 6  # N for the encoder stack.
  num_decoder_layers: int = 6  # N for the decoder stack.
  d_model: int = 512  # Width of embeddings and every sub-layer output.
  d_ff: int = 2048  # Inner width of the position-wise feed-forward network.
  num_heads: int = 8  # h, parallel attention heads.
  d_k: int = 0  # Query/key width per head; 0 means d_model / num_heads (paper).
  d_v: int = 0  # Value width per head; 0 means d_model / num_heads (paper).
  layer_norm_position: str = "post"  # "post": LN(x + sublayer(x)) as in the paper; "pre": x + sublayer(LN(x)) (t2t v2+).
  layer_norm_epsilon: float = 1e-6  # Layer-norm epsilon (tensor2tensor's value; the paper gives none).
  position_encoding: str = "sinusoid"  # "sinusoid" (Section 3.5) or "learned" (Table 3 row E).
  max_position: int = 1024  # Rows of the learned position table (row E); sinusoids need none.
  shared_embedding_and_softmax_weights: bool = True  # Tie target embedding and pre-softmax projection (Section 3.4).
  shared_source_target_embedding: bool = True  # Tie source and target embeddings; needs one shared vocabulary.
  attention_use_bias: bool = False  # Biases in the Q/K/V/O projections (the paper's equations have none; neither has t2t).
  ffn_activation: str = "relu"  # FFN non-linearity: max(0, x) in the paper.

  # --- Regularization (Section 5.4) ---
  dropout: float = 0.1  # P_drop on each sub-layer output and on embedding + position sums.
  attention_dropout: float = 0.0  # Dropout on attention weights (not in the paper; t2t v2 uses 0.1).
  relu_dropout: float = 0.0  # Dropout inside the FFN after the activation (not in the paper; t2t v2 uses 0.1).
  symbol_dropout: float = 0.0  # Training: each source and decoder-input token id becomes padding with this probability (t2t's symbol_dropout, "word dropout"; not in the paper).
  label_smoothing: float = 0.1  # eps_ls: target mass spread uniformly over the other tokens.

  # --- Optimization (Section 5.3) ---
  learning_rate_schedule: str = "noam"  # "noam": d_model^-0.5 * min(step^-0.5, step * warmup^-1.5); "constant".
  learning_rate_constant: float = 1.0  # Multiplies the schedule (t2t v3 uses 2.0); the rate itself for "constant".
  learning_rate_warmup_steps: int = 4000  # Noam warmup steps.
  learning_rate_decay_steps: int = 0  # t2t's linear_decay: the rate falls linearly to 0 over the last this-many updates before --train_steps; 0 = off (the paper's schedule).
  adam_beta1: float = 0.9  # Adam beta_1.
  adam_beta2: float = 0.98  # Adam beta_2.
  adam_epsilon: float = 1e-9  # Adam epsilon.
  clip_grad_norm: float = 0.0  # Global gradient-norm clip; 0 disables (the paper does not clip).

  # --- Batching (Section 5.1) ---
  batch_size: int = 4096  # Tokens per device per micro-batch: examples x padded length (max of source, target), as in t2t.
  accumulate_steps: int = 1  # Micro-batches summed into one optimizer update: tokens per update = batch_size x devices x this.
  max_length: int = 256  # Training pairs longer than this (either side, with EOS) are dropped; 0 keeps all.
  min_length_bucket: int = 8  # Smallest length-bucket boundary.
  length_bucket_step: float = 1.1  # Ratio between consecutive bucket boundaries (> 1).
  shuffle_buffer_size: int = 10000  # Examples in the training shuffle buffer.
  packed_batches: bool = False  # Training rows hold several pairs (t2t's packed problems), with segment ids and per-pair positions; off = length buckets.
  packed_length: int = 0  # Tokens per side of a packed row; 0 means max_length (t2t packs to max_length, 256 by default).

  # --- Numerics and compilation ---
  dtype: str = "float32"  # Keras dtype policy: float32, mixed_bfloat16, or mixed_float16 (with dynamic loss scaling).
  flash_attention: bool = False  # Let Keras use a fused flash-attention kernel where the platform has one (cuDNN, JAX on GPUs); off: the XLA matmul-softmax-matmul, as t2t computes it and 1.9x faster at length 32 on an H200 (bench/README.md).
  xla: str = "auto"  # XLA-compile: "true", "false", or "auto" = train step on GPU/TPU only, decode search always (t2tlite/xla_choice.py).
  xla_loss: bool = True  # TensorFlow, a train or eval step not compiled whole (xla off, the CPU default): compile its loss over the vocabulary alone with XLA, once per batch shape, which fuses the log-softmax passes (bench/README.md); false: no XLA in that step. JAX compiles the whole step anyway.

  # --- Vocabulary: filled from the problem at run time, saved so decoding rebuilds the same model ---
  input_vocab_size: int = 0  # Source vocabulary size; 0 until the problem sets it.
  target_vocab_size: int = 0  # Target vocabulary size; 0 until the problem sets it.

  def __post_init__(self):
    # Runs saved before "auto" hold a bool; --hparams may say xla=1 or xla=no.
    object.__setattr__(self, "xla", xla_choice.normalize(self.xla))
    for name, choices in _CHOICES.items():
      if getattr(self, name) not in choices:
        _fail(f"{name}={getattr(self, name)!r} must be one of {', '.join(choices)}")
    for name in ("num_encoder_layers", "num_decoder_layers", "d_model", "d_ff",
                 "num_heads", "batch_size", "accumulate_steps", "min_length_bucket",
                 "max_position"):
      if getattr(self, name) < (0 if name.startswith("num_") and "layers" in name else 1):
        _fail(f"{name}={getattr(self, name)} must be positive")
    for name in ("d_k", "d_v", "max_length", "packed_length", "learning_rate_warmup_steps",
                 "learning_rate_decay_steps",
                 "input_vocab_size", "target_vocab_size", "clip_grad_norm"):
      if getattr(self, name) < 0:
        _fail(f"{name}={getattr(self, name)} must be >= 0")
    for name in ("dropout", "attention_dropout", "relu_dropout", "symbol_dropout",
                 "label_smoothing"):
      if not 0.0 <= getattr(self, name) < 1.0:
        _fail(f"{name}={getattr(self, name)} must be in [0, 1)")
    if (self.d_k == 0 or self.d_v == 0) and self.d_model % self.num_heads:
      _fail(f"num_heads={self.num_heads} does not divide d_model={self.d_model}; "
            "set d_k and d_v explicitly")
    if self.packed_batches and not (self.packed_length or self.max_length):
      _fail("packed_batches needs a row length: set packed_length or max_length")
    if self.length_bucket_step <= 1.0:
      _fail(f"length_bucket_step={self.length_bucket_step} must be > 1")
    if self.learning_rate_schedule == "noam" and self.learning_rate_warmup_steps == 0:
      _fail("learning_rate_warmup_steps=0 is undefined for the noam schedule")
    if (self.shared_source_target_embedding and self.input_vocab_size and
        self.target_vocab_size and self.input_vocab_size != self.target_vocab_size):
      _fail(f"shared_source_target_embedding needs one vocabulary, got "
            f"input_vocab_size={self.input_vocab_size} and "
            f"target_vocab_size={self.target_vocab_size}")

  @property
  def key_dim(self) -> int:
    """d_k actually used: explicit, or d_model / h as in the paper."""
    return self.d_k or self.d_model // self.num_heads

  @property
  def value_dim(self) -> int:
    """d_v actually used: explicit, or d_model / h as in the paper."""
    return self.d_v or self.d_model // self.num_heads

  @property
  def packed_row_length(self) -> int:
    """Tokens per side of a packed row: packed_length, or max_length when it is 0."""
    return self.packed_length or self.max_length

  @property
  def longest_training_side(self) -> int:
    """The longest side (EOS included) a training pair may have; 0 = no limit.

    max_length, and with packed_batches also the row length: a pair must fit in a row.
    """
    if not self.packed_batches:
      return self.max_length
    return min(x for x in (self.max_length, self.packed_row_length) if x)

  def tokens_per_update(self, devices: int) -> int:
    """Target tokens (at most) in one optimizer update on `devices` devices."""
    return self.batch_size * devices * self.accumulate_steps

  def replace(self, **changes) -> "HParams":
    return dataclasses.replace(self, **changes)

  def override(self, text: str, flag: str = "--hparams") -> "HParams":
    """Applies "key=value,..." with type checking (see t2tlite.overrides)."""
    try:
      return overrides.apply_overrides(self, text, flag)
    except HParamsError as e:
      raise HParamsError(f"{flag}: {e}") from None

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: dict, source: str = "hparams") -> "HParams":
    if isinstance(values.get("xla"), bool):  # Saved before xla took "auto": true/false load as such.
      values = {**values, "xla": xla_choice.normalize(values["xla"])}
    return overrides.from_dict(cls, values, source)

  def save(self, path: str) -> None:
    """Writes the JSON atomically (t2tlite.files): a kill never leaves half a file."""
    with files.atomic_write(path) as f:
      f.write(overrides.to_json(self))

  @classmethod
  def load(cls, path: str) -> "HParams":
    with open(path) as f:
      try:
        values = json.load(f)
      except json.JSONDecodeError as e:
        raise HParamsError(f"{path}: not valid JSON ({e})") from None
    return cls.from_dict(values, source=path)


def _fail(message: str):
  raise HParamsError(message)
