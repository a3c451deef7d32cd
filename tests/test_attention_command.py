"""t2t-attention end to end and the trainer's attention/* images (issue 17), on the session's
tiny run (evaluated at steps 100 and 200, attention summaries on by default)."""

import dataclasses
import glob
import os

import numpy as np
import pytest

from t2tlite.visualization import report, summary, weights as weights_lib
from tests.conftest import TINY_RUN_STEPS, TinyRun
from tests.helpers import IMPORT_LOG, one_line_error, run, tensorflow_imported


def _images(event_dir):
  """{(tag, step): decoded RGB array} of every image summary under attention/."""
  import tensorflow as tf
  images = {}
  for path in glob.glob(os.path.join(event_dir, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if (value.tag.startswith("attention/")
            and value.metadata.plugin_data.plugin_name == "images"):
          blobs = tf.make_ndarray(value.tensor)  # [width, height, png, ...]
          images[(value.tag, event.step)] = tf.io.decode_png(blobs[2]).numpy()
  return images


def test_each_evaluation_logs_the_heatmap_grid_of_a_fixed_dev_sentence(tiny_run):
  trainer = tiny_run.trainer
  assert trainer.options.attention_summaries  # On by default.
  images = _images(os.path.join(tiny_run.output_dir, "eval"))
  every = TinyRun.options()["eval_every"]
  steps = list(range(every, TINY_RUN_STEPS + 1, every))
  assert len(steps) == 2
  assert sorted(images) == sorted((f"attention/{kind}", step)
                                  for kind in weights_lib.KINDS for step in steps)
  # The last images are the grids of the trained model's weights on the first dev pair.
  sentence = summary.fixed_dev_sentence(trainer.problem, trainer.data_dir)
  sources, references = trainer.problem.eval_text("dev", trainer.data_dir)
  encoder = trainer.problem.encoders()["inputs"]
  assert (sentence[0], sentence[1]) == (encoder.encode(sources[0]), encoder.encode(references[0]))
  attention = weights_lib.sentence_attention(trainer.model, *sentence)
  for kind in weights_lib.KINDS:
    want = summary.heatmap_grid(attention.weights(kind))
    got = images[(f"attention/{kind}", steps[-1])]
    assert got.shape == want.shape
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
  assert not np.array_equal(images[("attention/encoder", steps[0])],
                            images[("attention/encoder", steps[-1])])  # The heads moved.


def test_the_flag_turns_the_images_off(tiny_run, tmp_path, monkeypatch):
  import tensorflow as tf
  trainer = tiny_run.trainer
  for on in (False, True):  # An evaluation into a writer of its own, off then on.
    event_dir = str(tmp_path / str(on))
    monkeypatch.setattr(trainer, "eval_writer", tf.summary.create_file_writer(event_dir))
    monkeypatch.setattr(trainer, "options", dataclasses.replace(
        trainer.options, attention_summaries=on, eval_decode=False))
    trainer.evaluate(TINY_RUN_STEPS + 1)
    trainer.eval_writer.flush()
    assert len(_images(event_dir)) == (3 if on else 0)


def test_command_decodes_and_writes_every_output(tiny_run, tmp_path):
  out = str(tmp_path / "view")
  source = "3 4 5 6 7"
  proc = run("t2t-attention", f"--output_dir={tiny_run.output_dir}", f"--source={source}",
             f"--out={out}", "--layer=1", "--token=2", "--heads=2,4", "--merge_pieces",
             "--decode_hparams=beam_size=2")
  assert "decoded in" in proc.stderr and "token 2 '4', heads 2,4" in proc.stderr
  assert sorted(os.listdir(out)) == sorted(report.OUTPUT_FILES)
  from matplotlib import image
  for name in ("fig3.png", "fig4.png", "fig5.png", "heads.png"):
    assert image.imread(os.path.join(out, name)).ndim == 3
  saved = weights_lib.SentenceAttention.load_npz(os.path.join(out, "attention.npz"))
  assert saved.source_tokens == source.split() + ["<EOS>"]  # Whole tokens: merging keeps them.
  target = saved.target_tokens[:-1]
  assert saved.target_tokens[-1] == "<EOS>"
  encoder = tiny_run.trainer.problem.encoders()["inputs"]
  want = weights_lib.sentence_attention(tiny_run.trainer.model, encoder.encode(source),
                                        encoder.encode(" ".join(target)), source.split(), target)
  for kind in weights_lib.KINDS:  # The command restored the run's last checkpoint.
    np.testing.assert_allclose(saved.weights(kind), want.weights(kind), atol=1e-6)
  page = open(os.path.join(out, "attention.html"), encoding="utf-8").read()
  assert page.count('"weights":') == 3

  before = {n: os.path.getmtime(os.path.join(out, n)) for n in report.OUTPUT_FILES}
  one_line_error(run("t2t-attention", f"--output_dir={tiny_run.output_dir}",
                     f"--source={source}", f"--out={out}", check=False),
                 f"--out={out}", "--overwrite")
  assert before == {n: os.path.getmtime(os.path.join(out, n)) for n in report.OUTPUT_FILES}


def test_command_checks_the_layer_and_the_run_before_loading_tensorflow(tiny_run, tmp_path):
  for output_dir, fragments in ((tiny_run.output_dir, ["--layer=9", "2 layers"]),
                                (tmp_path, [f"--output_dir={tmp_path}: no hparams.json"])):
    proc = run("t2t-attention", f"--output_dir={output_dir}", "--source=3 4 5",
               f"--out={tmp_path / 'a'}", "--layer=9", check=False, env=IMPORT_LOG)
    one_line_error(proc, *fragments)
    assert not tensorflow_imported(proc)
    assert not os.path.exists(tmp_path / "a")


def test_layer_and_heads_are_checked_against_the_hparams():
  from tests.helpers import tiny_hparams
  hp = tiny_hparams(num_encoder_layers=3, num_decoder_layers=2)  # 4 heads.
  report.check_against_model(hp, "encoder", 3, "1,4")
  for kind, layer, heads, flag in (("decoder", 3, "", "--layer=3"),
                                   ("encoder_decoder", 3, "", "--layer=3"),
                                   ("encoder", 1, "5", "--heads=5"),
                                   ("encoder", 1, "1,2,3", "--heads=1,2,3")):
    with pytest.raises(report.AttentionViewError, match=flag):
      report.check_against_model(hp, kind, layer, heads)


def test_view_choices_name_the_flag_at_fault():
  rng = np.random.RandomState(0)
  w = rng.rand(2, 4, 3, 3).astype(np.float32)
  att = weights_lib.SentenceAttention(["a", "b", "<EOS>"], ["c", "d", "<EOS>"], w, w, w)
  view = report.choose_view(att, "encoder", layer=0, token="b", heads="3")
  assert (view.layer, view.token, view.heads[0], len(view.heads)) == (0, 1, 2, 2)
  assert report.choose_view(att, "decoder", layer=2, token="3").token == 2
  pieces = weights_lib.SentenceAttention(["\u2581mak", "ing", "\u2581it", "<EOS>"], ["<EOS>"],
                                         np.ones((1, 1, 4, 4)), np.ones((1, 1, 1, 1)),
                                         np.ones((1, 1, 1, 4)))
  assert report.choose_view(pieces, token="it").token == 2  # A word finds its first piece.
  assert report.choose_view(pieces, token="ing").token == 1
  for kwargs, flag in (({"token": "zz"}, "--token=zz"), ({"token": "4"}, "--token=4"),
                       ({"heads": "5"}, "--heads=5"), ({"heads": "x"}, "--heads=x"),
                       ({"layer": 3}, "--layer=3"), ({"kind": "x"}, "--kind=x")):
    with pytest.raises(report.AttentionViewError, match=flag):
      report.choose_view(att, **kwargs)
