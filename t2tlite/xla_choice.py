"""What the `xla` hparam ("auto", "true" or "false") means where the run is.

Training: "auto" compiles the train and eval steps with XLA on
a GPU or TPU, and not on a CPU, where the compiled step is slower and every
bucket shape costs a compilation (README: a 200-step Multi30k run took 5
minutes instead of 1). Decoding: the search compiles unless xla=false, CPU
included, where the compiled search is the faster one (bench/README.md: 28.2
vs 17.2 sentences/s). Each choice is logged once per process, e.g.
"xla for training: auto -> off (CPU)".

How XLA compiles on a CPU: `request_backend_level` sets XLA's backend (LLVM)
optimization level for the rest of the process, which the decode hparam
`xla_opt_level` asks for (parsing: 1; bench/README.md, "Parsing decode, ninth pass").
"""

import functools
import os

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


BACKEND_LEVEL_FLAG = "--xla_backend_optimization_level"


def request_backend_level(level: int) -> None:
  """Has XLA compile this process's programs at backend optimization `level` (1-3; 0: XLA's own).

  XLA has no per-program setting for it: it reads the XLA_FLAGS environment
  variable once, at the process's first compilation. So this acts only before
  anything is compiled (t2t-decoder, t2t-exporter and the interactive decoder
  call it before the model loads; in a process that compiled already, such as a
  trainer's dev decoding, the level in force stays). On a CPU only, where it was
  measured: level 1 compiles a beam-21 parsing search in a fifth less time and
  runs it faster, but runs a mixed_bfloat16 translation search a quarter
  slower, so the default stays XLA's (3). A level the user put in XLA_FLAGS wins.
  """
  if not level:
    return
  device = accelerator()
  if device:
    _log_once("compiling", f"XLA's own backend optimization level ({device}; "
              f"xla_opt_level={level} applies on a CPU only)")
    return
  flags = os.environ.get("XLA_FLAGS", "")
  if BACKEND_LEVEL_FLAG in flags:
    _log_once("compiling", f"XLA_FLAGS={flags!r} (it sets {BACKEND_LEVEL_FLAG}; "
              f"xla_opt_level={level} is not applied)")
    return
  os.environ["XLA_FLAGS"] = f"{flags} {BACKEND_LEVEL_FLAG}={level}".strip()
  _log_once("compiling", f"backend optimization level {level} for this process "
            f"(XLA_FLAGS {BACKEND_LEVEL_FLAG}={level}; XLA's default is 3)")


def _log_once(what: str, text: str) -> None:
  if what not in _logged:
    _logged.add(what)
    logging.info("xla for %s: %s", what, text)
