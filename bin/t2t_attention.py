r"""t2t-attention: look at what a trained model attends to, for one sentence.

  t2t-attention --output_dir=runs/multi30k_ende/train --data_dir=runs/multi30k_ende/data \
      --source="A man in an orange hat starring at something." --out=attention/

Writes into --out: fig3.png, fig4.png, fig5.png (the paper's Figures 3-5
layouts for --kind, --layer, --token and --heads), heads.png (every layer x
head of the three attention kinds as heatmaps), attention.html (a
self-contained page: pick kind, layer and heads, hover a token) and
attention.npz (the weights [layer, head, query, key] of the three kinds and
the tokens, arrays indexed from 0). Without --target the target is decoded
with the problem's default beam search. Tokens are the subword pieces;
--merge_pieces shows words (weights summed over a word's key pieces and
averaged over its query pieces). Layers, heads and positions are counted
from 1, as the paper counts them.
"""

import time

from absl import flags, logging

from t2tlite import cli, registry

FLAGS = flags.FLAGS
cli.define_registry_flags()
flags.DEFINE_string("output_dir", None, "The training run to look inside.")
flags.DEFINE_string("checkpoint_path", None, "A specific checkpoint (default: the latest).")
flags.DEFINE_string("source", None, "The source sentence.")
flags.DEFINE_string("target", None, "Its target (default: decoded with the problem's beam).")
flags.DEFINE_string("decode_hparams", "", "--decode_hparams for decoding the target.")
flags.DEFINE_string("out", None, "Directory for the figures, the page and the weights.")
flags.DEFINE_enum("kind", "encoder", ["encoder", "decoder", "encoder_decoder"],
                  "Attention of Figures 3-5 (the paper's are encoder self-attention).")
flags.DEFINE_integer("layer", 0, "Layer of Figures 3-5, from 1 (0: the second-to-last, as the "
                     "paper's 'layer 5 of 6').")
flags.DEFINE_string("token", "", "Query token of Figures 3 and 4: its position from 1 or its "
                    "text (default: the token that puts the most weight farthest away).")
flags.DEFINE_string("heads", "", "One or two heads of Figures 4 and 5, from 1, e.g. 5,6 "
                    "(default: the two with the sharpest attention in the layer).")
flags.DEFINE_bool("merge_pieces", False, "Merge subword pieces into words: weights summed over "
                  "a word's key pieces, averaged over its query pieces.")
flags.DEFINE_bool("overwrite", False, "Replace the files of an earlier t2t-attention in --out.")


def main(argv):
  cli.handle_registry_flags()
  from t2tlite.training import run_dir, run_identity
  from t2tlite.visualization import report, weights

  output_dir = cli.require("output_dir")
  out_dir = cli.require("out")
  source = cli.require("source").strip()
  if not source:
    raise cli.UsageError("--source is empty")
  existing = report.existing_outputs(out_dir)
  if existing and not FLAGS.overwrite:
    raise cli.UsageError(f"--out={out_dir} holds {', '.join(existing)}; pass --overwrite to "
                         "replace them")
  # Every check that needs no model comes before the problem (and TensorFlow) loads.
  hparams = run_dir.load_hparams(output_dir)  # Names the directory when it is no run.
  report.check_against_model(hparams, FLAGS.kind, FLAGS.layer, FLAGS.heads)
  run_info = run_dir.load_run_info(output_dir)
  problem_name = FLAGS.problem or run_info.get("problem")
  if not problem_name:
    raise cli.UsageError(f"--problem is required ({output_dir} names none in run.json)")
  problem = registry.problem(problem_name)
  run_identity.check_data(output_dir, run_info, hparams, problem, FLAGS.data_dir,
                          command="inspected")
  encoders = problem.encoders(FLAGS.data_dir)
  start = time.perf_counter()
  model, checkpoint = run_dir.load_model(output_dir, FLAGS.checkpoint_path, FLAGS.hparams)
  logging.info("loaded %s in %.1f s", checkpoint, time.perf_counter() - start)
  source_ids = encoders["inputs"].encode(source)
  if FLAGS.target is not None:
    target_ids = encoders["targets"].encode(FLAGS.target)
  else:
    target_ids = _decode(problem, model, source_ids, encoders)
  start = time.perf_counter()
  attention = weights.sentence_attention(
      model, source_ids, target_ids, weights.piece_strings(encoders["inputs"], source_ids),
      weights.piece_strings(encoders["targets"], target_ids))
  logging.info("attention weights of %d source x %d target tokens in %.2f s", len(source_ids) + 1,
               len(target_ids) + 1, time.perf_counter() - start)
  if FLAGS.merge_pieces:
    attention = weights.merge_pieces(attention)
  view = report.choose_view(attention, FLAGS.kind, FLAGS.layer, FLAGS.token, FLAGS.heads)
  start = time.perf_counter()
  paths = report.write_report(attention, view, out_dir, title=source)
  queries = attention.tokens(view.kind)[0]
  logging.info("wrote %s in %.1f s (figures 3-5: %s, layer %d, token %d '%s', heads %s)",
               ", ".join(paths), time.perf_counter() - start, view.kind, view.layer + 1,
               view.token + 1, queries[view.token], ",".join(str(h + 1) for h in view.heads))


def _decode(problem, model, source_ids, encoders):
  """The best target ids (no EOS) under the problem's default decode hparams."""
  from t2tlite.decoding.decode_hparams import DecodeHParams
  from t2tlite.decoding.pipeline import DecodePipeline
  decode_hparams = DecodeHParams().override(problem.default_decode_hparams).override(
      FLAGS.decode_hparams, "--decode_hparams")
  start = time.perf_counter()
  pipeline = DecodePipeline(problem, model, decode_hparams, encoders=encoders)
  target_ids = pipeline.decoder.decode_ids([source_ids])[0]
  logging.info("decoded in %.1f s (%s): %s", time.perf_counter() - start, decode_hparams,
               encoders["targets"].decode(target_ids))
  return target_ids


def run():
  cli.run(main)


if __name__ == "__main__":
  run()
