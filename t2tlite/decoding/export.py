"""Text-to-text SavedModel export (t2t-exporter) and its loader (t2t-decoder --export_dir).

tensor2tensor exported ids and left the vocabulary to the client; this export
maps raw source lines to the lines `t2t-decoder` writes. Its `serving_default`
signature:

  inputs     string  [batch]      raw source lines
  outputs    string  [batch]      the best hypothesis of each line (nbest=N or
                                  return_beams: [batch, N], best first)
  scores     float32 like outputs log P(Y|X) / lp(|Y|) (greedy: log P(Y|X));
                                  0 for an empty line
  truncated  bool    [batch]      the line was cut to max_input_length tokens

Around the one compiled search (`Decoder.search_ids`, traced here for any
batch and width) the graph does what `DecodePipeline` does in Python: encode
(graph_text.py), cut to `max_input_length`, pad each row with EOS and PAD to a
multiple of `length_multiple`, decode, cut each hypothesis at its EOS, detokenize,
postprocess (parsing). The decode hparams are baked in. Empty (or all-blank)
lines decode to empty lines without running the model on them.

The directory's layout and version numbers: export_layout.py.
"""

import json
import os
import shutil
import tempfile
import time
from typing import Optional

import tensorflow as tf

from t2tlite import files
from t2tlite.constants import EOS_ID, PAD_ID
from t2tlite.decoding import graph_text
from t2tlite.decoding.export_layout import (INFO_FILE, ExportError, check_export_dir,
                                            check_free, resolve)

SIGNATURE = "serving_default"


class TextToText(tf.Module):
  """The exported module: `serve(inputs string [batch])` -> outputs, scores, truncated."""

  def __init__(self, pipeline):
    super().__init__()
    decoder = pipeline.decoder
    self.hp = pipeline.hparams
    # The model's variables, tracked so the SavedModel holds them.
    self.weights = [_tf_variable(w) for w in decoder.model.weights]
    self._decoder = decoder  # Not trackable: its search is saved inside `serve` only.
    self._limit = decoder.max_input_length
    self.source_text = graph_text.for_encoder(pipeline.encoders["inputs"])
    target = pipeline.encoders["targets"]
    self.target_text = (self.source_text if target is pipeline.encoders["inputs"]
                        else graph_text.for_encoder(target))
    self._trees = pipeline.problem.decode_postprocessor(self.hp) is not None
    if self._trees and not self.hp.constrain_trees:
      raise ExportError("--decode_hparams constrain_trees=false: the exported parser writes "
                        "trees in-graph only for the tree constraint's well-formed output; "
                        "export with constrain_trees=true")
    self.beams_written = self.hp.beams_written
    self.per_line = bool(self.hp.return_beams or self.hp.nbest)  # [batch, N] outputs.

  # Without AutoGraph, as the search it calls: nothing here branches or loops on a tensor.
  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")],
               autograph=False)
  def serve(self, inputs):
    hp = self.hp
    batch = tf.shape(inputs)[0]
    blank = tf.equal(tf.strings.length(tf.strings.strip(inputs)), 0)
    ids = self.source_text.encode(tf.where(blank, "", inputs))  # [batch, (tokens)]
    lengths = tf.cast(ids.row_lengths(), tf.int32)
    truncated = tf.zeros([batch], tf.bool)
    if self._limit:
      truncated = lengths > self._limit
      ids = ids[:, :self._limit]
      lengths = tf.minimum(lengths, self._limit)
    # [batch, width]: tokens, EOS, PAD up to a multiple of length_multiple (as Decoder pads).
    multiple = hp.length_multiple
    width = (tf.reduce_max(tf.concat([lengths, [0]], 0)) + 1 + multiple - 1) // multiple * multiple
    dense = ids.to_tensor(PAD_ID)
    dense = tf.pad(dense, [[0, 0], [0, width - tf.shape(dense)[1]]], constant_values=PAD_ID)
    dense = tf.where(tf.range(width)[tf.newaxis] == lengths[:, tf.newaxis], EOS_ID, dense)
    result = self._decoder.search_ids(dense, lengths)
    k = self.beams_written
    hyp_ids = result.ids[:, :k]  # [batch, k, length]
    scores = result.scores[:, :k]
    flat = tf.reshape(hyp_ids, [batch * k, -1])
    texts = self.target_text.decode(graph_text.ids_until_eos(flat))  # [batch * k]
    if self._trees:
      texts = graph_text.tree_lines(tf.repeat(inputs, k), texts,
                                    collapse_unary_repeats=hp.tree_collapse_unary_repeat)
    texts = tf.reshape(texts, [batch, k])
    empty = blank[:, tf.newaxis]
    texts = tf.where(empty, "", texts)
    scores = tf.where(empty, 0.0, scores)
    if not self.per_line:
      texts, scores = texts[:, 0], scores[:, 0]
    return {"outputs": texts, "scores": scores, "truncated": truncated}


def _tf_variable(weight):
  """The tf.Variable behind a Keras 3 weight (what a SavedModel stores)."""
  variable = getattr(weight, "_value", weight)
  if not isinstance(variable, tf.Variable):
    raise TypeError(f"weight {weight.path} is not backed by a tf.Variable")
  return variable


def export(pipeline, checkpoint_path: str, export_dir: str, version: int,
           overwrite: bool = False, info: Optional[dict] = None) -> str:
  """Writes the SavedModel of `pipeline` as `export_dir/<version>`; returns that path."""
  check_export_dir(export_dir)
  target = os.path.join(export_dir, str(version))
  if not overwrite:
    check_free(export_dir, version)
  os.makedirs(export_dir, exist_ok=True)
  module = TextToText(pipeline)
  staging = tempfile.mkdtemp(prefix=f".{version}.tmp-", dir=export_dir)
  try:
    start = time.perf_counter()
    signature = module.serve.get_concrete_function()
    tf.saved_model.save(module, staging, signatures={SIGNATURE: signature},
                        options=tf.saved_model.SaveOptions(function_aliases={"serve": module.serve}))
    os.makedirs(os.path.join(staging, "assets.extra"), exist_ok=True)
    record = dict(info or {}, checkpoint=os.path.abspath(checkpoint_path), version=version,
                  decode_hparams=_hparams_dict(pipeline.hparams),
                  max_input_length=pipeline.decoder.max_input_length,
                  outputs_per_line=module.beams_written if module.per_line else 0,
                  seconds=round(time.perf_counter() - start, 2))
    with files.atomic_write(os.path.join(staging, INFO_FILE)) as f:
      json.dump(record, f, indent=2, sort_keys=True)
    _replace(staging, target)
  finally:
    if os.path.exists(staging):
      shutil.rmtree(staging, ignore_errors=True)
  return target


def _hparams_dict(hp) -> dict:
  import dataclasses
  return dataclasses.asdict(hp)


def _replace(staging: str, target: str) -> None:
  """Renames staging to target; an old target is moved aside first and removed after."""
  old = None
  if os.path.exists(target):
    old = tempfile.mkdtemp(prefix=os.path.basename(target) + ".old-", dir=os.path.dirname(target))
    os.rename(target, os.path.join(old, "version"))
  os.rename(staging, target)
  if old:
    shutil.rmtree(old, ignore_errors=True)


class Exported:
  """A loaded export: `decode(lines) -> (outputs, scores, truncated)` as Python lists."""

  def __init__(self, path: str):
    self.path = resolve(path)
    import tensorflow_text  # noqa: F401 - registers the sentencepiece ops the graph uses.
    try:
      loaded = tf.saved_model.load(self.path)
    except (OSError, tf.errors.OpError, ValueError) as e:
      raise ExportError(f"--export_dir={path}: not a loadable SavedModel "
                        f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    self._loaded = loaded  # Keeps the variables alive.
    self._serve = loaded.signatures[SIGNATURE]
    info_path = os.path.join(self.path, INFO_FILE)
    self.info = {}
    if os.path.exists(info_path):
      with open(info_path) as f:
        self.info = json.load(f)

  def decode(self, lines):
    out = self._serve(inputs=tf.constant(list(lines), tf.string))
    texts = [_text(row) for row in out["outputs"].numpy()]
    return texts, out["scores"].numpy().tolist(), out["truncated"].numpy().tolist()


def _text(row):
  if isinstance(row, bytes):
    return row.decode("utf-8")
  return [t.decode("utf-8") for t in row]
