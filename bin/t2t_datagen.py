r"""t2t-datagen: write a problem's tokenized data (TFRecords) and text splits.

  t2t-datagen --problem=algorithmic_reverse --data_dir=data
  t2t-datagen --problem=multi30k_ende --data_dir=data/m30k --tmp_dir=raw/multi30k
  t2t-datagen --problem=translate_files --data_dir=data/mine \
      --problem_options="train_source=a.en,train_target=a.de,vocab_size=16000"

Finished files are kept: a second run does no work, and a killed run leaves
only `.incomplete` files, which a later run replaces.

For a machine without TensorFlow (the JAX-only GPU machines), also save the
batches the trainer will draw as plain numpy arrays:

  t2t-datagen --problem=multi30k_ende --data_dir=data/m30k --tmp_dir=raw/multi30k \
      --numpy_batches=batches/m30k --hparams_set=transformer_multi30k --numpy_steps=6000
  t2t-trainer --backend=jax --numpy_batches=batches/m30k \
      --hparams_set=transformer_multi30k --output_dir=runs/m30k_gpu --train_steps=6000

Batching depends on the hparams (token budget, buckets, accumulate_steps) and
the seed, so they are given here and the trainer checks its own against them.
This is a datagen flag, not a command of its own, because the batches are
datagen's output in another form: the same run writes (or reuses) the
TFRecords, then cuts them with the trainer's own input pipeline.
"""

from absl import flags, logging

from t2tlite import cli, registry

FLAGS = flags.FLAGS
cli.define_registry_flags(with_hparams=False)
flags.DEFINE_string("tmp_dir", None, "Raw downloads / source files of the problem.")
flags.DEFINE_string("problem_options", "", 'Problem options, e.g. "vocab_size=16000,'
                    'num_train_shards=8" or translate_files\' "train_source=a.en,...".')
flags.DEFINE_bool("verify", False, "Write nothing: read every record of every shard in "
                  "--data_dir (CRCs, record counts, SHA-256 against the manifest datagen "
                  "wrote) and name the first bad shard.")
flags.DEFINE_string("numpy_batches", None, "Also save --numpy_steps training batches and every "
                    "dev batch, cut as t2t-trainer cuts them, as .npz files in this directory "
                    "(for t2t-trainer --backend=jax --numpy_batches=DIR without TensorFlow).")
flags.DEFINE_integer("numpy_steps", 1000, "Training batches (optimizer updates) to save with "
                     "--numpy_batches.")
flags.DEFINE_string("hparams_set", None, "With --numpy_batches: the hparams set the trainer "
                    "will use (its batch_size, buckets, accumulate_steps, max_length).")
flags.DEFINE_string("hparams", "", "With --numpy_batches: the trainer's --hparams overrides.")
flags.DEFINE_integer("random_seed", 1, "With --numpy_batches: the trainer's --random_seed "
                     "(the shuffle order).")
flags.DEFINE_integer("numpy_devices", 1, "With --numpy_batches: devices the trainer will train "
                     "on (a global batch holds this many per-device batches).")


def main(argv):
  cli.handle_registry_flags()
  problem_name, data_dir = cli.require("problem"), cli.require("data_dir")
  if FLAGS.numpy_batches:  # Checked before the problem (and TensorFlow) loads.
    hparams = registry.hparams(cli.require("hparams_set")).override(FLAGS.hparams)
    if FLAGS.numpy_steps < 1 or FLAGS.numpy_devices < 1:
      raise cli.UsageError(f"--numpy_steps={FLAGS.numpy_steps} and --numpy_devices="
                           f"{FLAGS.numpy_devices} must be >= 1")
  problem = registry.problem(problem_name)
  problem.configure(FLAGS.problem_options)
  from t2tlite import files
  from t2tlite.data import shard_manifest
  if FLAGS.verify:
    from t2tlite.problems.problem import SPLITS
    if hasattr(problem, "use_saved_options"):
      problem.use_saved_options(data_dir)
    for line in shard_manifest.verify_problem(problem, data_dir, SPLITS):
      print(line)
    return
  for path in files.remove_incomplete(data_dir):  # Left by a killed run.
    logging.info("removed %s, left by an interrupted run", path)
  problem.generate_data(data_dir, FLAGS.tmp_dir)
  logging.info("%s: data in %s", problem.name, data_dir)
  if FLAGS.numpy_batches:
    from t2tlite.training import numpy_batches
    from t2tlite.progress import Progress
    inputs, targets = problem.vocab_sizes(data_dir)
    hparams = hparams.replace(input_vocab_size=inputs, target_vocab_size=targets)
    path = numpy_batches.write(problem, data_dir, hparams, FLAGS.numpy_batches,
                               FLAGS.numpy_steps, FLAGS.random_seed, FLAGS.numpy_devices,
                               Progress("numpy batches", FLAGS.numpy_steps, "batches"))
    logging.info("%s: %d training batches and the dev batches saved as numpy; see %s",
                 problem.name, FLAGS.numpy_steps, path)


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
