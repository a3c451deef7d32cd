"""Line-at-a-time decoding of a stream (t2t-decoder --decode_interactive).

The model (or the export) is loaded once; each line read is decoded at once
and its output line written and flushed before the next line is read, so a
pipe or a terminal gets every answer as soon as it exists. Output line i
always answers input line i: an empty line gives an empty line, and a line
that is not UTF-8 gives an empty line plus a one-line error (stderr), after
which decoding goes on.
"""

from typing import BinaryIO, Callable, TextIO


def pipeline_translator(pipeline) -> Callable[[str], str]:
  """line -> the line t2t-decoder writes for it, with an in-process DecodePipeline."""
  def translate(line: str) -> str:
    decoded = pipeline.decode([line])
    if decoded.truncated:
      from absl import logging
      logging.warning("line longer than %d tokens: truncated",
                      pipeline.decoder.max_input_length)
    return decoded.lines[0]
  return translate


def export_translator(export_dir: str) -> Callable[[str], str]:
  """line -> the same line, decoded by a t2t-exporter SavedModel (export.py)."""
  from absl import logging
  from t2tlite.decoding import export_layout

  path = export_layout.resolve(export_dir)  # A wrong directory: one line before TensorFlow loads.
  from t2tlite.decoding import export
  exported = export.Exported(path)
  logging.info("decoding standard input with the export %s", exported.path)
  with_scores = exported.info.get("decode_hparams", {}).get("write_beam_scores", False)

  def translate(line: str) -> str:
    texts, scores, truncated = exported.decode([line])
    if truncated[0]:
      logging.warning("line longer than %s tokens: truncated",
                      exported.info.get("max_input_length", "max_input_length"))
    texts, scores = texts[0], scores[0]
    if isinstance(texts, str):
      texts, scores = [texts], [scores]
    fields = []
    for text, score in zip(texts, scores):
      fields.append(text)
      if with_scores:
        fields.append(f"{score:.4f}")
    return "\t".join(fields)
  return translate


def serve_lines(source: BinaryIO, sink: TextIO, translate: Callable[[str], str],
                report_error: Callable[[str], None]) -> int:
  """Decodes `source` line by line into `sink` until end of input; returns lines read."""
  count = 0
  while True:
    raw = source.readline()
    if not raw:
      return count
    count += 1
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    raw = raw[:-1] if raw.endswith(b"\r") else raw
    try:
      line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      report_error(f"standard input line {count}: not UTF-8 text ({e.reason} at byte {e.start}); "
                   "skipped")
      line = None
    output = translate(line) if line and line.strip() else ""
    sink.write(output + "\n")
    sink.flush()
