r"""t2t-trainer: train a registered model on a registered problem.

  t2t-trainer --problem=algorithmic_reverse --hparams_set=transformer_tiny \
      --output_dir=runs/reverse --train_steps=3000
  t2t-trainer --hparams_set=transformer_base --describe --vocab_size=37000

Every visible GPU trains (MirroredStrategy; --num_gpus / --gpu_ids narrow
it); several machines train together with --worker_hosts=h0:port,h1:port and
--task_index=i on each (or TF_CONFIG). --hparams=accumulate_steps=N sums N
micro-batches per update. Run it again with the same flags after an
interruption and it resumes from the last checkpoint in --output_dir.

--backend=jax (or KERAS_BACKEND=jax) trains the same model in a jax.jit step,
on every JAX device (keras.distribution.DataParallel), into the same
checkpoint files; where TensorFlow is not installed it trains from batches
saved by `t2t-datagen --numpy_batches=DIR` (--numpy_batches=DIR here instead
of --problem/--data_dir), writing .npz checkpoints and scalars.csv.
"""

from absl import flags

from t2tlite import backends, cli, registry
from t2tlite.training import options as options_lib

FLAGS = flags.FLAGS
cli.define_registry_flags()
flags.DEFINE_string("output_dir", None, "Checkpoints, hparams.json and TensorBoard events.")
options_lib.define_flags()  # --train_steps, --eval_every, ...: defined once, with TrainOptions.
flags.adopt_module_key_flags(options_lib)  # --help lists them as this command's.
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
flags.DEFINE_string("numpy_batches", None, "With --backend=jax: train from the batches "
                    "`t2t-datagen --numpy_batches=DIR` saved (for machines without "
                    "TensorFlow), instead of --problem/--data_dir.")
_TF_DEVICE_FLAGS = ("num_gpus", "gpu_ids", "cpu_devices", "worker_hosts", "task_index")


def main(argv):
  # Before anything imports keras: it reads KERAS_BACKEND once, at its first import.
  backend = backends.select(FLAGS.backend)
  cli.handle_registry_flags()
  hparams = registry.hparams(cli.require("hparams_set")).override(FLAGS.hparams)
  if FLAGS.describe:
    return describe(hparams)
  options = options_lib.from_flags()  # Checked in one place: TrainOptions.
  output_dir = cli.require("output_dir")
  if FLAGS.numpy_batches:
    if FLAGS.problem or FLAGS.data_dir:
      raise cli.UsageError("--numpy_batches replaces --problem and --data_dir (the batches "
                           "record their problem); pass one or the other")
    if backend != backends.JAX:
      raise cli.UsageError(f"--numpy_batches feeds --backend=jax, not {backend}")
    from t2tlite.training.numpy_batches import SavedBatches
    problem = SavedBatches(FLAGS.numpy_batches)
  else:
    problem = registry.problem(cli.require("problem"))
  strategy, dev_decoding = None, None
  if backend == backends.JAX:
    given = [f"--{name}" for name in _TF_DEVICE_FLAGS if FLAGS[name].present]
    if given:
      raise cli.UsageError(f"{', '.join(given)}: TensorFlow's device flags; --backend=jax "
                           "trains on every JAX device (JAX_PLATFORMS / CUDA_VISIBLE_DEVICES "
                           "choose them)")
  else:
    from t2tlite.training import distribution  # TensorFlow loads after flag errors.
    strategy = distribution.make_strategy(  # Before any TensorFlow op runs.
        num_gpus=FLAGS.num_gpus, gpu_ids=FLAGS.gpu_ids, cpu_devices=FLAGS.cpu_devices,
        worker_hosts=FLAGS.worker_hosts, task_index=FLAGS.task_index)
    if options.eval_decode:  # Real decoding of dev at each evaluation (beam search: TensorFlow).
      from t2tlite.decoding.dev_decoding import DevDecoding
      dev_decoding = DevDecoding.from_options(problem, FLAGS.data_dir, options)
  from t2tlite.training.trainer import Trainer
  trainer = Trainer(problem, hparams, output_dir, data_dir=FLAGS.data_dir,
                    options=options, model_name=FLAGS.model, strategy=strategy,
                    run_info={"hparams_set": FLAGS.hparams_set, "hparams": FLAGS.hparams},
                    dev_decoding=dev_decoding)
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
