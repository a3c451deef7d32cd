"""Learning curves read back from event files equal what the trainer wrote; the PNG is drawn."""

import os

import numpy as np
import pytest
import tensorflow as tf

from t2tlite.training import curves, progress


def _write(log_dir, points):
  writer = tf.summary.create_file_writer(str(log_dir))
  for step, scalars in points:
    progress.write_scalars(writer, step, scalars)
  writer.close()


def test_scalars_round_trip_and_a_resumed_run_overrides_old_steps(tmp_path):
  _write(tmp_path, [(100, {"loss": 5.0, "learning_rate": 1e-4}), (200, {"loss": 4.0})])
  # A run killed after step 200 and resumed from ckpt-100 logs step 200 again, in a new file.
  os.utime(next(tmp_path.glob("events.*")), (1, 1))  # Older: files are read oldest first.
  _write(tmp_path, [(200, {"loss": 3.5}), (300, {"loss": 3.0})])
  scalars = curves.read_scalars(str(tmp_path))
  assert scalars["loss"] == [(100, 5.0), (200, 3.5), (300, 3.0)]
  np.testing.assert_allclose(scalars["learning_rate"][0][1], 1e-4, rtol=1e-6)


def test_an_event_file_cut_by_a_kill_reads_up_to_the_cut(tmp_path):
  from t2tlite.training import resume
  _write(tmp_path, [(step, {"loss": 10.0 / step}) for step in (100, 200, 300)])
  path = next(tmp_path.glob("events.*"))
  whole = path.read_bytes()
  path.write_bytes(whole[:-5])  # The last record (step 300) cut inside, as a kill leaves it.
  assert curves.read_scalars(str(tmp_path))["loss"] == [(100, pytest.approx(0.1)),
                                                         (200, pytest.approx(0.05))]
  assert resume.last_logged_step(str(tmp_path)) == 200
  path.write_bytes(whole)  # The same file whole: the cut was all that was missing.
  assert curves.read_scalars(str(tmp_path))["loss"][-1][0] == 300


def test_plot_draws_the_panels_the_runs_have(tmp_path):
  from matplotlib import image
  run = tmp_path / "run"
  _write(run, [(s, {"loss": 10.0 / s}) for s in (100, 200, 300)])
  _write(run / "eval", [(s, {"loss": 11.0 / s, "bleu": s / 10.0}) for s in (100, 200, 300)])
  png = tmp_path / "curves.png"
  drawn = curves.plot_runs({"a": curves.read_run(str(run))}, str(png), "title")
  assert drawn == ["train/loss", "eval/loss", "eval/bleu"]
  pixels = image.imread(str(png))
  assert pixels.shape[1] > pixels.shape[0] > 100  # Three panels side by side.
  with pytest.raises(curves.CurvesError, match="no TensorBoard event files"):
    curves.read_run(str(tmp_path / "empty"))


def test_a_parsing_run_draws_its_dev_f1(tmp_path):
  run = tmp_path / "run"
  _write(run, [(s, {"loss": 10.0 / s}) for s in (100, 200)])
  _write(run / "eval", [(s, {"loss": 11.0 / s, "parse_f1": s / 10.0, "parse_recall": 1.0})
                        for s in (100, 200)])
  drawn = curves.plot_runs({"a": curves.read_run(str(run))}, str(tmp_path / "c.png"), "")
  assert drawn == ["train/loss", "eval/loss", "eval/parse_f1"]


def test_run_flags_name_runs():
  assert curves.parse_run_flags(["ende=runs/a/train", "runs/b/train/"]) == {
      "ende": "runs/a/train", "train": "runs/b/train/"}
