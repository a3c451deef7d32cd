r"""t2t-datagen: write a problem's tokenized data (TFRecords) and text splits.

  t2t-datagen --problem=algorithmic_reverse --data_dir=data
  t2t-datagen --problem=multi30k_ende --data_dir=data/m30k --tmp_dir=raw/multi30k
  t2t-datagen --problem=translate_files --data_dir=data/mine \
      --problem_options="train_source=a.en,train_target=a.de,vocab_size=16000"

Finished files are kept: a second run does no work, and a killed run leaves
only `.incomplete` files, which a later run replaces.
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


def main(argv):
  cli.load_registry_or_exit()
  problem = registry.problem(cli.require("problem"))
  problem.configure(FLAGS.problem_options)
  data_dir = cli.require("data_dir")
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


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
