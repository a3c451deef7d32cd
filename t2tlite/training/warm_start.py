"""Warm start: a new run begins from another run's weights (`t2t-trainer --warm_start_from`).

tensor2tensor's `--warm_start_from`, fairseq's `--finetune-from-model` and
OpenNMT's `-train_from` with a reset optimizer: the model's weights are read
from a checkpoint of another run (a training checkpoint, an average, or a
`best/` copy), matched by Keras path, the key every t2tlite checkpoint uses
(checkpoints.py), while the optimizer (Adam moments, step, learning-rate
schedule) starts afresh at step 0 with this run's seed, dropout streams and
data order.

- A weight of this model that the checkpoint lacks keeps its initial value;
  a checkpoint weight this model lacks is ignored. Both lists are logged.
- A weight found with another shape is an error (the architectures differ),
  except the vocabulary-sized ones (embeddings, a separate softmax), where a
  different shape, or a recorded vocabulary file with another SHA-256, means
  another vocabulary: a one-line error unless `--warm_start_skip_embeddings`,
  which leaves them at their initial values (fine-tuning onto a new
  vocabulary, tensor2tensor's `warm_start_from` with `vocab` excluded).
- Nothing is assigned unless every check passes.

Only a new run is warm-started: a run directory that already holds a
checkpoint resumes from it, whatever `--warm_start_from` says.
"""

import json
import os
from typing import Dict, List, NamedTuple, Optional

from absl import logging

from t2tlite.errors import UserError
from t2tlite.training import checkpoint_manifest, resume

FLAG = "--warm_start_from"
SKIP_FLAG = "--warm_start_skip_embeddings"
# Layers whose weights are vocabulary-sized (models/transformer.py names them).
VOCABULARY_LAYERS = ("shared_embedding", "source_embedding", "target_embedding", "softmax")
_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


class WarmStartError(UserError):
  """The warm-start checkpoint cannot seed this model; one line naming it."""


class WarmStartReport(NamedTuple):
  checkpoint: str  # The prefix read.
  loaded: List[str]  # Paths of the weights assigned from it.
  not_found: List[str]  # This model's weights it lacks (kept at their initial values).
  skipped: List[str]  # Vocabulary weights left alone (--warm_start_skip_embeddings).
  unused: List[str]  # Its model weights this model lacks (ignored).


def checkpoint_key(weight_path: str) -> str:
  """The checkpoint key of a Keras weight path (tf.train escapes "." as ".." and "/" as ".S")."""
  return "model/" + weight_path.replace(".", "..").replace("/", ".S") + _SUFFIX


def _weight_path(key: str) -> str:
  """The inverse of `checkpoint_key` for a model variable key."""
  escaped = key[len("model/"):-len(_SUFFIX)]
  out, i = [], 0
  while i < len(escaped):
    if escaped[i] == "." and i + 1 < len(escaped):
      out.append("/" if escaped[i + 1] == "S" else escaped[i + 1])
      i += 2
    else:
      out.append(escaped[i])
      i += 1
  return "".join(out)


def is_vocabulary_weight(weight_path: str) -> bool:
  return weight_path.split("/", 1)[0] in VOCABULARY_LAYERS


def resolve(path: str) -> str:
  """The checkpoint prefix `path` names: a prefix (or one of its files), or a run directory's newest."""
  if os.path.isdir(path):
    candidates = [p for p in checkpoint_manifest.list_checkpoints(path)
                  if checkpoint_manifest.verify(p, full=False)[0] != "bad"]
    if not candidates:
      raise WarmStartError(f"{FLAG}={path}: a directory without a usable checkpoint")
    prefix = candidates[-1]
  else:
    prefix = resume.resolve_checkpoint_path(path, FLAG)
  resume.verify_or_raise(prefix, FLAG)
  return prefix


def _source_data(prefix: str) -> Optional[dict]:
  """The data identity in run.json of the run that wrote `prefix` (also from averaged/, best/)."""
  directory = os.path.dirname(os.path.abspath(prefix))
  for candidate in (directory, os.path.dirname(directory)):
    run_file = os.path.join(candidate, "run.json")
    if os.path.exists(run_file):
      try:
        with open(run_file) as f:
          return json.load(f).get("data")
      except (OSError, ValueError):
        return None
  return None


def _vocabulary_differs(source: Optional[dict], current: Optional[dict]) -> Optional[str]:
  """Why the recorded vocabularies differ (same sizes, another file), or None."""
  if not source or not current:
    return None
  a, b = source.get("vocab_sha256"), current.get("vocab_sha256")
  if a and b and a != b:
    return (f"its vocabulary {source.get('vocab_file')} (sha256 {a[:12]}) is not this run's "
            f"{current.get('vocab_file')} (sha256 {b[:12]})")
  return None


def warm_start(model, path: str, skip_embeddings: bool = False,
               current_data: Optional[dict] = None) -> WarmStartReport:
  """Assigns `model` the weights of checkpoint `path` that match by Keras path (module docstring).

  `current_data` is this run's data identity (run_identity.data_identity), compared
  with the source run's run.json when both record a vocabulary file.
  """
  import tensorflow as tf  # Heavy: only when weights are really read.
  prefix = resolve(path)
  try:
    reader = tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    raise WarmStartError(f"{FLAG}={prefix}: unreadable checkpoint "
                         f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
  shapes = reader.get_variable_to_shape_map()
  source_paths = {_weight_path(k) for k in shapes
                  if k.startswith("model/") and k.endswith(_SUFFIX) and
                  not k.startswith("model/rng_state_")}
  if not source_paths:
    raise WarmStartError(f"{FLAG}={prefix}: holds no t2tlite model weights")
  other_vocabulary = None if skip_embeddings else _vocabulary_differs(
      _source_data(prefix), current_data)
  if other_vocabulary:
    raise WarmStartError(f"{FLAG}={prefix}: {other_vocabulary}; pass {SKIP_FLAG} to start the "
                         "embeddings afresh")
  assign: Dict[str, tuple] = {}
  not_found, skipped = [], []
  for weight in model.weights:
    if skip_embeddings and is_vocabulary_weight(weight.path):
      skipped.append(weight.path)
      continue
    if weight.path not in source_paths:
      not_found.append(weight.path)
      continue
    there, here = list(shapes[checkpoint_key(weight.path)]), list(weight.shape)
    if there != here:
      if is_vocabulary_weight(weight.path):
        raise WarmStartError(
            f"{FLAG}={prefix}: {weight.path} is {there} there and {here} here: the "
            f"vocabularies differ; pass {SKIP_FLAG} to start the embeddings afresh")
      raise WarmStartError(f"{FLAG}={prefix}: {weight.path} is {there} there and {here} here: "
                           "the architectures differ (compare the two runs' hparams.json)")
    assign[weight.path] = (weight, reader.get_tensor(checkpoint_key(weight.path)))
  for weight, value in assign.values():
    weight.assign(value.astype(weight.dtype))
  report = WarmStartReport(prefix, sorted(assign), not_found, skipped,
                           sorted(source_paths - {w.path for w in model.weights}))
  _log(report)
  return report


def _log(report: WarmStartReport) -> None:
  def names(paths):
    shown = ", ".join(paths[:12])
    return shown + (f" and {len(paths) - 12} more" if len(paths) > 12 else "")

  logging.info("%s=%s: %d weights loaded; the optimizer and step start afresh", FLAG,
               report.checkpoint, len(report.loaded))
  if report.not_found:
    logging.warning("%s: %d weights not in the checkpoint, kept at their initial values: %s",
                    FLAG, len(report.not_found), names(report.not_found))
  if report.skipped:
    logging.warning("%s: %d vocabulary weights not loaded (%s): %s", FLAG, len(report.skipped),
                    SKIP_FLAG, names(report.skipped))
  if report.unused:
    logging.warning("%s: %d checkpoint weights this model does not have, ignored: %s", FLAG,
                    len(report.unused), names(report.unused))
