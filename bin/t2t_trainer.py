r"""t2t-trainer: train a registered model on a registered problem.

  t2t-trainer --problem=algorithmic_reverse --hparams_set=transformer_tiny \
      --output_dir=runs/reverse --train_steps=3000
  t2t-trainer --hparams_set=transformer_base --describe --vocab_size=37000

Every visible GPU trains (MirroredStrategy; --num_gpus / --gpu_ids narrow
it); several machines train together with --worker_hosts=h0:port,h1:port and
--task_index=i on each (or TF_CONFIG). --hparams=accumulate_steps=N sums N
micro-batches per update. Run it again with the same flags after an
interruption and it resumes from the last checkpoint in --output_dir.
"""

from absl import flags

from t2tlite import cli, registry
from t2tlite.training.trainer import TrainOptions

FLAGS = flags.FLAGS
cli.define_registry_flags()
flags.DEFINE_string("output_dir", None, "Checkpoints, hparams.json and TensorBoard events.")
flags.DEFINE_integer("train_steps", 100000, "Total optimizer updates (paper base: 100k).")
flags.DEFINE_integer("train_seconds", 0, "Also stop once training has taken this many seconds of "
                     "wall time, resumes included (0: no limit); the last step is checkpointed.")
flags.DEFINE_integer("eval_every", 1000, "Evaluate on dev every N steps (0: at the end only).")
flags.DEFINE_integer("eval_steps", 0, "Dev batches per evaluation (0: all of dev).")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every N steps.")
flags.DEFINE_integer("save_checkpoints_secs", 600, "...or every N seconds (paper: 10 minutes).")
flags.DEFINE_integer("keep_checkpoint_max", 20, "Checkpoints to keep.")
flags.DEFINE_integer("average_last_n", 0, "Average the last N checkpoints into "
                     "<output_dir>/averaged/ at the end of training (0: off; paper: 5 base, "
                     "20 big).")
flags.DEFINE_bool("eval_decode", True, "At each evaluation also decode dev for real (beam "
                  "search) and log BLEU / exact match to TensorBoard.")
flags.DEFINE_integer("eval_decode_lines", 0, "Dev sentences decoded per evaluation (0: all).")
flags.DEFINE_string("eval_decode_hparams", "", "--decode_hparams for the dev decodes.")
flags.DEFINE_integer("log_every", 100, "Steps between progress lines and summaries.")
flags.DEFINE_bool("overwrite_run", False, "Start over in an --output_dir that holds a run: its "
                  "files are moved into <output_dir>/previous-N/, not deleted.")
flags.DEFINE_integer("random_seed", 1, "Seed for initialisation, dropout and shuffling.")
flags.DEFINE_bool("describe", False, "Build the model without data, print its summary and "
                  "parameter count, and exit.")
flags.DEFINE_integer("vocab_size", None, "Vocabulary size for --describe (default: the "
                     "problem's, or 37000, the paper's EN-DE BPE vocabulary).")
flags.DEFINE_integer("num_gpus", -1, "GPUs to mirror over, the first N visible (-1: all; "
                     "0: CPU only). hparams batch_size is tokens per GPU.")
flags.DEFINE_string("gpu_ids", "", "Comma list of GPU indices to use instead of --num_gpus.")
flags.DEFINE_integer("cpu_devices", 1, "Without GPUs: logical CPU devices to mirror over "
                     "(exercises MirroredStrategy on a CPU machine; no speed-up).")
flags.DEFINE_string("worker_hosts", "", "host:port of every worker, comma-separated, the same "
                    "on all of them: MultiWorkerMirroredStrategy (else TF_CONFIG, if set).")
flags.DEFINE_integer("task_index", 0, "This worker's index in --worker_hosts (0 is the chief, "
                     "which alone writes --output_dir).")


def main(argv):
  cli.load_registry_or_exit()
  hparams = registry.hparams(cli.require("hparams_set")).override(FLAGS.hparams)
  if FLAGS.describe:
    return describe(hparams)
  problem = registry.problem(cli.require("problem"))
  if FLAGS.train_seconds < 0:
    raise cli.UsageError(f"--train_seconds={FLAGS.train_seconds}: use 0 (no limit) or N >= 1")
  if FLAGS.average_last_n < 0:
    raise cli.UsageError(f"--average_last_n={FLAGS.average_last_n}: use 0 (off) or N >= 1")
  options = TrainOptions(
      train_steps=FLAGS.train_steps, eval_every=FLAGS.eval_every, eval_steps=FLAGS.eval_steps,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps,
      save_checkpoints_secs=FLAGS.save_checkpoints_secs,
      keep_checkpoint_max=FLAGS.keep_checkpoint_max, log_every=FLAGS.log_every,
      random_seed=FLAGS.random_seed, average_last_n=FLAGS.average_last_n,
      eval_decode=FLAGS.eval_decode, eval_decode_lines=FLAGS.eval_decode_lines,
      eval_decode_hparams=FLAGS.eval_decode_hparams, train_seconds=FLAGS.train_seconds,
      overwrite_run=FLAGS.overwrite_run)
  output_dir = cli.require("output_dir")
  from t2tlite.training import distribution  # TensorFlow loads after flag errors.
  strategy = distribution.make_strategy(  # Before any TensorFlow op runs.
      num_gpus=FLAGS.num_gpus, gpu_ids=FLAGS.gpu_ids, cpu_devices=FLAGS.cpu_devices,
      worker_hosts=FLAGS.worker_hosts, task_index=FLAGS.task_index)
  from t2tlite.training.trainer import Trainer
  trainer = Trainer(problem, hparams, output_dir, data_dir=FLAGS.data_dir,
                    options=options, model_name=FLAGS.model, strategy=strategy,
                    run_info={"hparams_set": FLAGS.hparams_set, "hparams": FLAGS.hparams})
  trainer.train()


def describe(hparams):
  if FLAGS.vocab_size:
    vocab = (FLAGS.vocab_size, FLAGS.vocab_size)
  elif FLAGS.problem:
    vocab = registry.problem(FLAGS.problem).vocab_sizes(FLAGS.data_dir)
  else:
    vocab = (37000, 37000)
  hparams = hparams.replace(input_vocab_size=vocab[0], target_vocab_size=vocab[1])
  model = registry.model(FLAGS.model)(hparams)
  model.summary(line_length=110)
  print(f"vocab_size: {vocab[1]}")
  print(f"parameters: {model.count_params()}")


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
