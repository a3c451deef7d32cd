r"""t2t-exporter: write a trained model as a text-to-text TensorFlow SavedModel.

  t2t-exporter --problem=multi30k_ende --data_dir=data --output_dir=runs/m30k \
      [--checkpoint_path=runs/m30k/averaged/ckpt-2000] [--export_dir=runs/m30k/export] \
      [--decode_hparams="beam_size=4,alpha=0.6"]

Writes EXPORT_DIR/<version>/ (TF Serving's layout; version = 10 * step + 0 for
a checkpoint of the run, + 1 for an average, + 2 elsewhere) and prints its path
on stdout. Its `serving_default` signature takes raw source lines (string
[batch]) and returns `outputs` (the lines t2t-decoder writes), `scores` and
`truncated`; the vocabulary is in its assets and the beam search with these
decode hparams in its graph. Load it with only tensorflow and tensorflow_text:

  import tensorflow as tf, tensorflow_text
  serve = tf.saved_model.load("runs/m30k/export/20000").signatures["serving_default"]
  serve(inputs=tf.constant(["A dog runs."]))["outputs"]

An existing version is replaced only with --overwrite.
"""

import os

from absl import flags, logging

from t2tlite import cli, registry

FLAGS = flags.FLAGS
cli.define_registry_flags()
flags.DEFINE_string("output_dir", None, "The training run to export.")
flags.DEFINE_string("checkpoint_path", None, "A specific checkpoint (default: the run's newest).")
flags.DEFINE_string("export_dir", None, "Where the versions go (default: <output_dir>/export).")
flags.DEFINE_string("decode_hparams", "", 'Baked into the export, e.g. "beam_size=4,alpha=0.6".')
flags.DEFINE_integer("version", None, "The version number (default: from the checkpoint).")
flags.DEFINE_bool("overwrite", False, "Replace an existing version.")


def main(argv):
  cli.handle_registry_flags()
  from t2tlite.decoding import export_layout
  from t2tlite.decoding.loading import check_runs, split_runs
  from t2tlite.training import checkpoint_manifest, run_dir

  output_dir = cli.require("output_dir")
  if len(split_runs(output_dir)) > 1:  # t2t-decoder decodes several as an ensemble; export one.
    raise cli.UsageError(f"--output_dir={output_dir}: t2t-exporter exports one run "
                         "(t2t-decoder decodes several, comma-separated, as an ensemble)")
  # Every check that needs no model comes before TensorFlow loads.
  ((_, named),) = check_runs(output_dir, FLAGS.checkpoint_path, FLAGS.hparams_set)
  problem_name = FLAGS.problem or run_dir.load_run_info(output_dir).get("problem")
  if not problem_name:
    raise cli.UsageError("--problem is required (the run does not record its problem)")
  export_dir = FLAGS.export_dir or os.path.join(output_dir, "export")
  export_layout.check_export_dir(export_dir)
  if FLAGS.version is not None and FLAGS.version < 0:
    raise cli.UsageError(f"--version={FLAGS.version} must be >= 0")
  if named and not FLAGS.overwrite:
    version = (FLAGS.version if FLAGS.version is not None else export_layout.export_version(
        named, output_dir, checkpoint_manifest.step_of(named)))
    export_layout.check_free(export_dir, version)
  from t2tlite.decoding import export
  from t2tlite.decoding.loading import load_pipeline

  problem = registry.problem(problem_name)
  pipeline, checkpoint = load_pipeline(output_dir, problem, FLAGS.data_dir, FLAGS.decode_hparams,
                                       FLAGS.checkpoint_path, FLAGS.hparams, FLAGS.hparams_set)
  step = checkpoint_manifest.step_of(checkpoint)
  version = (FLAGS.version if FLAGS.version is not None
             else export_layout.export_version(checkpoint, output_dir, step))
  logging.info("exporting %s (step %d) as version %d with %s", checkpoint, step, version,
               pipeline.hparams)
  path = export.export(pipeline, checkpoint, export_dir, version, overwrite=FLAGS.overwrite,
                       info=dict(problem=problem.name, step=step,
                                 output_dir=os.path.abspath(output_dir)))
  logging.info("wrote %s (%.1f MB)", path, _megabytes(path))
  print(path)


def _megabytes(path):
  total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
  return total / 2**20


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
