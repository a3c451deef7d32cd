"""t2t-decoder: batch-translate a file (or a problem's split) with a trained model.

  t2t-decoder --problem=algorithmic_reverse --output_dir=runs/reverse \
      --decode_from_file=test.inputs --decode_to_file=test.decoded \
      --decode_reference=test.targets \
      --decode_hparams="beam_size=4,alpha=0.6,extra_length=50"

The model is rebuilt from the hparams saved in --output_dir. Without
--decode_from_file, the problem's --decode_split is decoded and scored.
Scores go to stdout and to <decode_to_file>.scores.json.
"""

import json
import os
import time

from absl import flags, logging

from t2tlite import cli, registry

FLAGS = flags.FLAGS
cli.define_registry_flags()
flags.DEFINE_string("output_dir", None, "The training run to decode with.")
flags.DEFINE_string("checkpoint_path", None, "A specific checkpoint (default: the latest).")
flags.DEFINE_string("decode_hparams", "", 'e.g. "beam_size=4,alpha=0.6,extra_length=50".')
flags.DEFINE_string("decode_from_file", None, "Source lines to decode.")
flags.DEFINE_string("decode_to_file", None, "Where to write the decodes, one line per source.")
flags.DEFINE_string("decode_reference", None, "Reference lines to score the decodes against.")
flags.DEFINE_string("decode_split", "test", "Split decoded when --decode_from_file is unset.")
flags.DEFINE_bool("overwrite", False, "Replace an existing --decode_to_file.")


def main(argv):
  cli.load_registry_or_exit()
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.decoder import Decoder
  from t2tlite.metrics import scoring
  from t2tlite.training import run_dir

  output_dir = cli.require("output_dir")
  problem = registry.problem(cli.require("problem"))
  saved = run_dir.load_run_info(output_dir).get("hparams_set")
  if FLAGS.hparams_set and saved and FLAGS.hparams_set != saved:
    raise cli.UsageError(f"--hparams_set={FLAGS.hparams_set} but {output_dir} was trained "
                         f"with {saved}")
  decode_hparams = DecodeHParams().override(problem.default_decode_hparams).override(
      FLAGS.decode_hparams)
  sources, references, target = _inputs(problem, output_dir)
  if os.path.exists(target) and not FLAGS.overwrite:
    raise cli.UsageError(f"--decode_to_file={target} exists; pass --overwrite to replace it")

  model, checkpoint = run_dir.load_model(output_dir, FLAGS.checkpoint_path, FLAGS.hparams)
  logging.info("decoding %d lines with %s (%s)", len(sources), checkpoint, decode_hparams)
  encoders = problem.encoders(FLAGS.data_dir)
  start = time.perf_counter()
  decoder = Decoder(model, decode_hparams, problem.decode_constraint(decode_hparams, encoders))
  postprocess = problem.decode_postprocessor()
  decodes = decoder.decode_lines(sources, encoders["inputs"], encoders["targets"], postprocess)
  seconds = time.perf_counter() - start
  if hasattr(postprocess, "summary"):
    logging.info("%s", postprocess.summary())
  if decoder.truncated:
    logging.warning("%d of %d sources were longer than %d tokens and were truncated",
                    decoder.truncated, len(sources), decoder.max_input_length)
  _write_lines(target, decodes)
  logging.info("%d batch shapes (each traced, and XLA-compiled when xla=true)",
               len(decoder.shapes_seen))
  logging.info("wrote %s: %d lines in %.1f s (%.1f sentences/s)", target, len(decodes),
               seconds, len(decodes) / max(seconds, 1e-9))
  if references is not None:
    best = [line.split("\t")[0] for line in decodes]  # Score the best hypothesis.
    scores = scoring.score(best, references, problem.eval_metrics)
    scores.update(lines=len(decodes), checkpoint=checkpoint, seconds=round(seconds, 2))
    with open(target + ".scores.json", "w") as f:
      json.dump(scores, f, indent=2)
    print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in scores.items()))


def _inputs(problem, output_dir):
  """(source lines, reference lines or None, output path)."""
  if FLAGS.decode_from_file:
    sources = cli.read_flag_file("decode_from_file", FLAGS.decode_from_file)
    references = None
    if FLAGS.decode_reference:
      references = cli.read_flag_file("decode_reference", FLAGS.decode_reference)
      if len(references) != len(sources):
        raise cli.UsageError(
            f"--decode_reference={FLAGS.decode_reference} has {len(references)} lines but "
            f"--decode_from_file={FLAGS.decode_from_file} has {len(sources)}")
    target = FLAGS.decode_to_file or f"{FLAGS.decode_from_file}.decodes"
    return sources, references, target
  sources, references = problem.eval_text(FLAGS.decode_split, FLAGS.data_dir)
  target = FLAGS.decode_to_file or os.path.join(
      output_dir, f"{problem.name}.{FLAGS.decode_split}.decodes")
  return sources, references, target


def _write_lines(path, lines):
  """Writes via a temporary file, so an interrupted run leaves no half file."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    f.writelines(line + "\n" for line in lines)
  os.replace(tmp, path)


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
