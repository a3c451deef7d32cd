"""--warm_start_from: a new run starts from another run's weights, matched by Keras path.

The source checkpoints are written here, model-only (as averaged/ and best/
are), from a model initialised with another seed than the run's, so a weight
equal to the source's was loaded, not initialised alike.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2tlite import registry
from t2tlite.models.transformer import Transformer
from t2tlite.training import checkpoint_manifest, checkpoints, warm_start
from t2tlite.training.checkpoint_manifest import CheckpointError
from t2tlite.training.options import TrainOptions, TrainOptionsError
from t2tlite.training.warm_start import WarmStartError
from tests.helpers import (TINY_RUN_HPARAMS, checkpoint_key, checkpoint_values, tiny_problem,
                           tiny_trainer)


def run_hparams(**changes):
  """The tiny run's hparams with its problem's vocabulary sizes (what its Trainer builds)."""
  inputs, targets = tiny_problem().vocab_sizes(None)
  hp = registry.hparams("transformer_tiny").replace(**TINY_RUN_HPARAMS)
  return hp.replace(**dict(dict(input_vocab_size=inputs, target_vocab_size=targets), **changes))


def source_checkpoint(directory, seed=5, **changes):
  """(model, prefix): a model-only checkpoint `directory/ckpt-7` of a model from `seed`."""
  keras.utils.set_random_seed(seed)
  model = Transformer(run_hparams(**changes))
  prefix = str(directory / "ckpt-7")
  tf.train.Checkpoint(model=checkpoints.model_trackable(model)).write(prefix)
  checkpoint_manifest.write_manifest(prefix)
  return model, prefix


def values(model):
  return {w.path: w.numpy().copy() for w in model.weights}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  return source_checkpoint(tmp_path_factory.mktemp("source"))


@pytest.fixture
def fresh():
  keras.utils.set_random_seed(1)
  return Transformer(run_hparams())


def test_new_run_starts_from_the_weights_with_a_fresh_optimizer_then_resumes_itself(
    tmp_path, source, monkeypatch):
  source_model, prefix = source
  options = dict(warm_start_from=prefix, eval_decode=False, random_seed=2)
  trainer = tiny_trainer(tmp_path / "warm", 0, **options)
  trainer.train()
  expected = values(source_model)
  saved = checkpoint_values(str(tmp_path / "warm" / "ckpt-0"))
  for weight in trainer.model.weights:
    np.testing.assert_array_equal(weight.numpy(), expected[weight.path], err_msg=weight.path)
    np.testing.assert_array_equal(saved[checkpoint_key(weight)], expected[weight.path])
  assert trainer.step == 0
  # Adam starts afresh: no moment carries anything over.
  assert all(not np.any(v.numpy()) for v in trainer.optimizer.variables)
  with open(tmp_path / "warm" / "run.json") as f:
    assert json.load(f)["warm_start_from"] == prefix

  # Rerun: it resumes its own checkpoint and does not load the source again.
  monkeypatch.setattr(warm_start, "warm_start", lambda *a, **k: pytest.fail("warm-started twice"))
  resumed = tiny_trainer(tmp_path / "warm", 0, **options)
  resumed.train()
  assert resumed._restored.endswith("ckpt-0")


def test_unmatched_weights_are_reported_and_kept(tmp_path, fresh):
  # A source with 3 decoder layers into this 2-layer model: its third layer is ignored.
  source_model, three = source_checkpoint(tmp_path / "three", num_decoder_layers=3)
  expected = values(source_model)
  report = warm_start.warm_start(fresh, three)
  assert report.checkpoint == three and not report.not_found and not report.skipped
  assert report.unused and sorted(report.unused) == sorted(
      p for p in expected if p.startswith("decoder_layer_2/"))
  for weight in fresh.weights:
    np.testing.assert_array_equal(weight.numpy(), expected[weight.path])
  # A 2-layer source into a 3-layer model: the third layer keeps its initial values.
  keras.utils.set_random_seed(1)
  deeper = Transformer(run_hparams(num_decoder_layers=3))
  before = values(deeper)
  _, two = source_checkpoint(tmp_path / "two")
  report = warm_start.warm_start(deeper, two)
  assert not report.unused and report.not_found and sorted(report.not_found) == sorted(
      p for p in before if p.startswith("decoder_layer_2/"))
  for weight in deeper.weights:
    if weight.path in report.not_found:
      np.testing.assert_array_equal(weight.numpy(), before[weight.path])


def test_another_vocabulary_is_an_error_unless_the_embeddings_are_skipped(tmp_path, fresh):
  source_model, prefix = source_checkpoint(tmp_path, input_vocab_size=20, target_vocab_size=20)
  before = values(fresh)
  vocab = fresh.hparams.target_vocab_size
  with pytest.raises(WarmStartError, match=(
      rf"--warm_start_from=.*ckpt-7: shared_embedding/embeddings is \[20, 32\] there and "
      rf"\[{vocab}, 32\] here: the vocabularies differ; pass --warm_start_skip_embeddings")):
    warm_start.warm_start(fresh, prefix)
  for weight in fresh.weights:  # Nothing assigned before the error.
    np.testing.assert_array_equal(weight.numpy(), before[weight.path])
  report = warm_start.warm_start(fresh, prefix, skip_embeddings=True)
  assert report.skipped == ["shared_embedding/embeddings"]
  expected = values(source_model)
  for weight in fresh.weights:
    want = before if weight.path in report.skipped else expected
    np.testing.assert_array_equal(weight.numpy(), want[weight.path])


def test_same_sizes_but_another_vocabulary_file_is_an_error(tmp_path, fresh):
  _, prefix = source_checkpoint(tmp_path)
  with open(tmp_path / "run.json", "w") as f:
    json.dump({"data": {"vocab_file": "vocab.model", "vocab_sha256": "a" * 64}}, f)
  current = {"vocab_file": "vocab.model", "vocab_sha256": "b" * 64}
  with pytest.raises(WarmStartError, match="its vocabulary vocab.model \\(sha256 aaaaaaaaaaaa\\) "
                     "is not this run's vocab.model \\(sha256 bbbbbbbbbbbb\\); pass "
                     "--warm_start_skip_embeddings"):
    warm_start.warm_start(fresh, prefix, current_data=current)
  assert warm_start.warm_start(fresh, prefix, True, current).skipped


def test_other_architecture_and_bad_paths_are_one_line_errors(tmp_path, fresh):
  _, prefix = source_checkpoint(tmp_path, d_ff=128)
  with pytest.raises(WarmStartError, match=r"is \[32, 128\] there and \[32, 64\] here: the "
                     "architectures differ"):
    warm_start.warm_start(fresh, prefix)
  # A run directory names its newest checkpoint; a missing one lists what is there.
  assert warm_start.resolve(str(tmp_path)) == prefix
  with pytest.raises(CheckpointError, match=r"--warm_start_from=.*ckpt-9: no such checkpoint "
                     r"\(checkpoints there: ckpt-7\)"):
    warm_start.resolve(str(tmp_path / "ckpt-9"))
  (tmp_path / "empty").mkdir()
  with pytest.raises(WarmStartError, match="a directory without a usable checkpoint"):
    warm_start.resolve(str(tmp_path / "empty"))
  with pytest.raises(TrainOptionsError, match="--warm_start_skip_embeddings: needs "
                     "--warm_start_from"):
    TrainOptions(warm_start_skip_embeddings=True)


def test_checkpoint_keys_round_trip(fresh):
  for weight in fresh.weights:
    assert warm_start._weight_path(warm_start.checkpoint_key(weight.path)) == weight.path
    assert warm_start.checkpoint_key(weight.path) == checkpoint_key(weight)

