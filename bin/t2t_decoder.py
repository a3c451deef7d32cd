r"""t2t-decoder: batch-translate a file (or a problem's split) with a trained model.

  t2t-decoder --problem=algorithmic_reverse --output_dir=runs/reverse \
      --decode_from_file=test.inputs --decode_to_file=test.decoded \
      --decode_reference=test.targets \
      --decode_hparams="beam_size=4,alpha=0.6,extra_length=50"

The model is rebuilt from the hparams saved in --output_dir. Without
--decode_from_file, the problem's --decode_split is decoded and scored.
Scores go to stdout and to <decode_to_file>.scores.json.

  t2t-decoder --problem=multi30k_ende --data_dir=data --output_dir=runs/m30k \
      --decode_interactive             # or: --decode_interactive --export_dir=runs/m30k/export

reads standard input line by line and writes each decode (the line
t2t-decoder would write to a file) as soon as it is ready, until end of input.
An empty line gives an empty line; a line that is not UTF-8 gives an empty
line and a one-line error on stderr, and decoding goes on.

  t2t-decoder --problem=multi30k_ende --data_dir=data --output_dir=runs/a,runs/b \
      --checkpoint_path=runs/a/averaged/ckpt-5000,runs/b/averaged/ckpt-5100 \
      --decode_split=dev --decode_to_file=dev.ensemble.de

decodes with several runs as one ensemble (each next token scored by the mean of
the members' distributions, t2tlite/decoding/ensemble.py); --checkpoint_path is
then empty (each run's newest) or one checkpoint per run, in the same order.
"""

import json
import os
import sys

from absl import flags, logging

from t2tlite import cli, files, registry
from t2tlite.progress import Progress

FLAGS = flags.FLAGS
cli.define_registry_flags()
flags.DEFINE_string("output_dir", None, "The training run to decode with; several, "
                    "comma-separated, decode as an ensemble (the mean of their next-token "
                    "distributions; they must share --data_dir's vocabulary).")
flags.DEFINE_string("checkpoint_path", None, "A specific checkpoint (default: the latest); "
                    "with several runs, one per run, comma-separated, in --output_dir's order.")
flags.DEFINE_string("decode_hparams", "", 'e.g. "beam_size=4,alpha=0.6,extra_length=50".')
flags.DEFINE_string("decode_from_file", None, "Source lines to decode ('-': standard input, "
                    "decodes to standard output unless --decode_to_file).")
flags.DEFINE_string("decode_to_file", None, "Where to write the decodes, one line per source.")
flags.DEFINE_string("decode_reference", None, "Reference lines to score the decodes against.")
flags.DEFINE_string("decode_split", "test", "Split decoded when --decode_from_file is unset.")
flags.DEFINE_bool("overwrite", False, "Replace an existing --decode_to_file.")
flags.DEFINE_bool("decode_interactive", False, "Decode standard input line by line (a pipe or a "
                  "terminal), each output written as soon as its line is decoded, until end "
                  "of input; the model is loaded once.")
flags.DEFINE_string("export_dir", None, "With --decode_interactive: decode with this t2t-exporter "
                    "output (a version directory, or the directory of versions: the newest) "
                    "instead of --output_dir's checkpoint.")


def main(argv):
  cli.handle_registry_flags()
  if FLAGS.decode_interactive:
    return _interactive()
  if FLAGS.export_dir:
    raise cli.UsageError("--export_dir decodes only with --decode_interactive")
  from t2tlite.decoding.loading import check_runs, load_pipeline

  output_dir, problem_name = cli.require("output_dir"), cli.require("problem")
  runs = check_runs(output_dir, FLAGS.checkpoint_path, FLAGS.hparams_set)  # Before TensorFlow.
  target = _target(output_dir, len(runs))
  _refuse_to_overwrite(target)
  sources, references = _file_inputs()
  problem = registry.problem(problem_name)
  if not target:
    target = os.path.join(output_dir, f"{problem.name}.{FLAGS.decode_split}.decodes")
    _refuse_to_overwrite(target)
  if sources is None:
    sources, references = problem.eval_text(FLAGS.decode_split, FLAGS.data_dir)
  pipeline, checkpoint = load_pipeline(output_dir, problem, FLAGS.data_dir, FLAGS.decode_hparams,
                                       FLAGS.checkpoint_path, FLAGS.hparams, FLAGS.hparams_set)
  logging.info("decoding %d lines with %s (%s)", len(sources), checkpoint, pipeline.hparams)
  reporter = Progress("decoding", len(sources), "lines")
  decoded = pipeline.decode(sources, references, reporter.update)  # Scores the best of each line.
  reporter.finish(len(sources))
  decoder, seconds = pipeline.decoder, decoded.seconds
  if decoded.postprocess_summary:
    logging.info("%s", decoded.postprocess_summary)
  if decoded.truncated:
    logging.warning("%d of %d sources were longer than %d tokens and were truncated",
                    decoded.truncated, len(sources), decoder.max_input_length)
  _write_lines(target, decoded.lines)
  first, workers = decoder.first_shape_seconds, decoder.concurrent_batches()
  logging.info("%d batch shapes (each traced, and XLA-compiled unless xla=false), %.1f s in the "
               "batches that met a new shape (tracing, compiling and their own search)%s",
               len(decoder.shapes_seen), first,
               f"; {workers} batches searched at once, so these times overlap" if workers > 1 else "")
  logging.info("wrote %s: %d lines in %.1f s (%.1f sentences/s%s)", target, len(decoded.lines),
               seconds, len(decoded.lines) / max(seconds, 1e-9),
               f"; {seconds - first:.1f} s outside the new-shape batches" if workers == 1 else "")
  # A batch's search runs until its slowest sentence is done: its cost grows with these.
  logging.info("search loop steps per batch: %s", decoder.last_steps)
  if references is not None:
    scores = dict(decoded.metrics)
    scores.update(lines=len(decoded.lines), checkpoint=checkpoint, seconds=round(seconds, 2))
    with files.atomic_write(target + ".scores.json") as f:
      json.dump(scores, f, indent=2)
    print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in scores.items()))


def _interactive():
  """--decode_interactive: one line in, its decode out (flushed), until end of input."""
  from t2tlite.decoding import interactive
  if FLAGS.export_dir:
    translate = interactive.export_translator(FLAGS.export_dir)
  else:
    from t2tlite.decoding.loading import check_runs, load_pipeline
    output_dir, problem_name = cli.require("output_dir"), cli.require("problem")
    check_runs(output_dir, FLAGS.checkpoint_path, FLAGS.hparams_set)  # Before TensorFlow.
    pipeline, checkpoint = load_pipeline(
        output_dir, registry.problem(problem_name), FLAGS.data_dir, FLAGS.decode_hparams,
        FLAGS.checkpoint_path, FLAGS.hparams, FLAGS.hparams_set)
    logging.info("decoding standard input with %s (%s)", checkpoint, pipeline.hparams)
    translate = interactive.pipeline_translator(pipeline)
  interactive.serve_lines(sys.stdin.buffer, sys.stdout, translate, _line_error)


def _line_error(message):
  print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr, flush=True)


def _target(output_dir, run_count):
  """Where the decodes go ('-': standard output); None: the run's file for --decode_split,
  named after the problem (an alias's canonical name is known once the problem loads)."""
  if FLAGS.decode_from_file == "-":
    return FLAGS.decode_to_file or "-"
  if FLAGS.decode_from_file:
    return FLAGS.decode_to_file or f"{FLAGS.decode_from_file}.decodes"
  if not FLAGS.decode_to_file and run_count > 1:  # No run's directory is the ensemble's.
    raise cli.UsageError(f"--output_dir={output_dir} names several runs: pass --decode_to_file")
  return FLAGS.decode_to_file


def _refuse_to_overwrite(target):
  if target and target != "-" and os.path.exists(target) and not FLAGS.overwrite:
    raise cli.UsageError(f"--decode_to_file={target} exists; pass --overwrite to replace it")


def _file_inputs():
  """(source lines, reference lines or None) of --decode_from_file; (None, None) without it
  (the problem's --decode_split is decoded)."""
  if not FLAGS.decode_from_file:
    return None, None
  if FLAGS.decode_from_file == "-":
    sources = sys.stdin.read().splitlines()
  else:
    sources = cli.read_flag_file("decode_from_file", FLAGS.decode_from_file)
  references = (cli.read_flag_file("decode_reference", FLAGS.decode_reference)
                if FLAGS.decode_reference else None)
  if references is not None and FLAGS.decode_from_file != "-" and len(references) != len(sources):
    raise cli.UsageError(
        f"--decode_reference={FLAGS.decode_reference} has {len(references)} lines but "
        f"--decode_from_file={FLAGS.decode_from_file} has {len(sources)}")
  return sources, references


def _write_lines(path, lines):
  """Writes atomically, so an interrupted run leaves no half file ('-': standard output)."""
  if path == "-":
    sys.stdout.writelines(line + "\n" for line in lines)
    return
  from t2tlite import files
  with files.atomic_write(path) as f:
    f.writelines(line + "\n" for line in lines)


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
