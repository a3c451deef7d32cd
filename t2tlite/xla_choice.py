"""What the `xla` hparam ("auto", "true" or "false") means where the run is.

Training: "auto" compiles the train and eval steps with XLA on
a GPU or TPU, and not on a CPU, where the compiled step is slower and every
bucket shape costs a compilation (README: a 200-step Multi30k run took 5
minutes instead of 1). Decoding: the search compiles unless xla=false, CPU
included, where the compiled search is the faster one (bench/README.md: 28.2
vs 17.2 sentences/s). Each choice is logged once per process, e.g.
"xla for training: auto -> off (CPU)".
"""

import functools

from absl import logging

AUTO, TRUE, FALSE = "auto", "true", "false"
CHOICES = (AUTO, TRUE, FALSE)

_logged = set()


def normalize(value) -> str:
  """"auto"/"true"/"false" from a str or a bool (the type of `xla` in runs saved before "auto")."""
  if isinstance(value, bool):
    return TRUE if value else FALSE
  text = str(value).strip().lower()
  return {"1": TRUE, "yes": TRUE, "0": FALSE, "no": FALSE}.get(text, text)


@functools.lru_cache(maxsize=None)
def accelerator() -> str:
  """"GPU" or "TPU" if TensorFlow sees one, else "" (a CPU-only machine)."""
  import tensorflow as tf
  for kind in ("TPU", "GPU"):
    if tf.config.list_physical_devices(kind):
      return kind
  return ""


def train_xla(hparams) -> bool:
  """Whether the train/eval steps are XLA-compiled (each whole, model included)."""
  value = normalize(hparams.xla)
  if value != AUTO:
    return value == TRUE
  device = accelerator()
  _log_once("training", f"{AUTO} -> {'on (' + device + ')' if device else 'off (CPU)'}")
  return bool(device)


def decode_xla(hparams, decode_choice: str = AUTO) -> bool:
  """Whether the decoder's search is XLA-compiled: always, unless xla=false.

  `decode_choice` (the `xla` decode hparam) overrides the run's hparam when it
  is not "auto": a run trained with xla=false (the CPU recipes once set it)
  still decodes compiled with --decode_hparams=xla=true, several times faster
  for long outputs (the uncompiled loop copies every key/value cache at each step).
  """
  value = normalize(decode_choice)
  if value != AUTO:
    return value == TRUE
  value = normalize(hparams.xla)
  if value == AUTO:
    _log_once("decoding", f"{AUTO} -> on (the compiled search is faster on CPU too; "
              "xla=false runs it uncompiled)")
  return value != FALSE


def _log_once(what: str, text: str) -> None:
  if what not in _logged:
    _logged.add(what)
    logging.info("xla for %s: %s", what, text)
