"""Ensemble decoding: the mixture of the members' distributions, through the one search."""

import os

import numpy as np
import pytest

from t2tlite.decoding.decode_hparams import DecodeHParams
from t2tlite.decoding.decoder import Decoder
from t2tlite.decoding.ensemble import Ensemble
from t2tlite.models.transformer import Transformer
from tests.helpers import (IMPORT_LOG, greedy_by_recomputation, one_line_error, run,
                           tensorflow_imported, tiny_hparams)


EARLY_STEPS = slice(1, 4, 2)  # The tiny run's checkpoints at steps 40 and 80.


@pytest.fixture(scope="module")
def members(tiny_run):
  """Two early checkpoints of the session's tiny run: not yet peaked, so their mixture
  decodes differently from either of them alone (test_the_mixture_decodes_unlike_...)."""
  from t2tlite.training import run_dir
  return [run_dir.load_model(tiny_run.output_dir, _checkpoint(tiny_run, step), "xla=false")[0]
          for step in tiny_run.steps[EARLY_STEPS]]


def _checkpoint(tiny_run, step):
  return os.path.join(tiny_run.output_dir, f"ckpt-{step}")


def _sources(count=8, seed=0):
  """Random strings of the reverse task's symbols (ids 2-11), 2-9 long."""
  rng = np.random.RandomState(seed)
  return [list(rng.randint(2, 12, size=n)) for n in rng.randint(2, 10, size=count)]


def test_greedy_ensemble_is_argmax_of_the_mean_distribution(members):
  """The cached, compiled search over the ensemble picks, token by token, the argmax of the
  members' mean probability computed from their full forward passes, and scores the
  sentence with the mixture's log-probability."""
  sources = _sources()
  hp = DecodeHParams(beam_size=1, extra_length=4, batch_size=3)
  decoded = Decoder(Ensemble(members), hp).decode_nbest(sources)
  for source, beams in zip(sources, decoded):
    (ids, score), = beams
    expected_ids, expected_score = greedy_by_recomputation(members, source, 4)
    assert ids == expected_ids
    assert score == pytest.approx(expected_score, abs=1e-4)


def test_the_mixture_decodes_unlike_either_member(members):
  """The members disagree, so the test above tells a mixture from either member."""
  sources = _sources()
  mixture = [greedy_by_recomputation(members, source, 4)[0] for source in sources]
  for member in members:
    assert [greedy_by_recomputation([member], source, 4)[0] for source in sources] != mixture


def test_cached_and_uncached_ensembles_agree_in_beam_search(members):
  sources = _sources(seed=1)
  hp = DecodeHParams(beam_size=3, extra_length=4, nbest=3, batch_size=4)
  cached = Decoder(Ensemble(members), hp).decode_nbest(sources)
  uncached = Decoder(Ensemble(members), hp.override("use_cache=false")).decode_nbest(sources)
  for with_cache, without in zip(cached, uncached):
    assert [ids for ids, _ in with_cache] == [ids for ids, _ in without]
    np.testing.assert_allclose([s for _, s in with_cache], [s for _, s in without], atol=1e-4)


def test_a_model_twice_decodes_as_the_model(members):
  """The mean of two equal distributions is that distribution: beams and scores unchanged."""
  model = members[0]
  sources = _sources(seed=2)
  hp = DecodeHParams(beam_size=4, extra_length=4, nbest=4, batch_size=3)
  alone = Decoder(model, hp).decode_nbest(sources)
  twice = Decoder(Ensemble([model, model]), hp).decode_nbest(sources)
  for single, pair in zip(alone, twice):
    assert [ids for ids, _ in single] == [ids for ids, _ in pair]
    np.testing.assert_allclose([s for _, s in single], [s for _, s in pair], atol=1e-4)


def test_members_must_share_the_target_vocabulary(members):
  other = Transformer(tiny_hparams(xla=False))  # 20 target ids; the tiny run's have 12.
  with pytest.raises(ValueError, match=r"target vocabulary size: \[12, 20\]"):
    Ensemble([members[0], other])
  with pytest.raises(ValueError, match="at least 2 members"):
    Ensemble([members[0]])


def test_decoder_command_decodes_two_checkpoints_as_their_mixture(tiny_run, tmp_path):
  """t2t-decoder --output_dir=RUN,RUN --checkpoint_path=A,B: the greedy decodes of the two
  checkpoints' mixture, as recomputing both models at every step finds them."""
  from t2tlite import registry
  from t2tlite.training import run_dir
  out = tiny_run.output_dir
  first, last = (_checkpoint(tiny_run, step) for step in tiny_run.steps[EARLY_STEPS])
  encoders = registry.problem("algorithmic_reverse").encoders()
  lines = [" ".join(str(t) for t in np.random.RandomState(i).randint(0, 10, size=4 + i % 5))
           for i in range(12)]  # The reverse task's symbols, 0-9.
  sources = tmp_path / "sources"
  sources.write_text("\n".join(lines) + "\n")
  decoded = tmp_path / "decoded"
  run("t2t-decoder", "--problem=algorithmic_reverse", f"--output_dir={out},{out}",
      f"--checkpoint_path={first},{last}", f"--decode_from_file={sources}",
      f"--decode_to_file={decoded}", "--decode_hparams=beam_size=1,extra_length=5")
  models = [run_dir.load_model(out, path, "xla=false")[0] for path in (first, last)]
  expected = [encoders["targets"].decode(greedy_by_recomputation(
      models, encoders["inputs"].encode(line), 5)[0]) for line in lines]
  assert decoded.read_text().splitlines() == expected


def test_ensemble_flags_refuse_what_they_cannot_do(tiny_run, tmp_path):
  """Each refusal is one line, found before TensorFlow loads (none needs a model)."""
  out = tiny_run.output_dir
  args = ["--problem=algorithmic_reverse", f"--output_dir={out},{out}"]
  sources = tmp_path / "sources"
  sources.write_text("3 4 5\n")
  for command, flags, fragments in (
      ("t2t-decoder", [*args, f"--checkpoint_path={out}/ckpt-200", f"--decode_from_file={sources}",
                       f"--decode_to_file={tmp_path}/x"],
       ["--checkpoint_path names 1 checkpoint(s) for 2 run(s)"]),
      ("t2t-decoder", args, ["names several runs", "--decode_to_file"]),
      ("t2t-exporter", args, ["exports one run"]),
      ("t2t-decoder", ["--problem=algorithmic_reverse", f"--output_dir={out},",
                       f"--decode_from_file={sources}", f"--decode_to_file={tmp_path}/x"],
       ["an empty run directory in the list"])):
    proc = run(command, *flags, check=False, env=IMPORT_LOG)
    one_line_error(proc, *fragments)
    assert not tensorflow_imported(proc), (command, flags)
