"""The Noam schedule and Adam settings of Section 5.3."""

import numpy as np
import pytest

from t2tlite import registry
from t2tlite.training import optimization


def paper_lrate(step, d_model=512, warmup=4000):
  return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("step", [1, 2, 100, 3999, 4000, 4001, 100000])
def test_noam_matches_paper_formula(step):
  schedule = optimization.NoamSchedule(512, 4000)
  # `iterations` counts updates already made: the first update (step 1) sees iterations=0.
  np.testing.assert_allclose(float(schedule(step - 1)), paper_lrate(step), rtol=1e-6)


def test_noam_peaks_at_warmup():
  schedule = optimization.NoamSchedule(512, 4000)
  iterations = np.arange(3900, 4100)
  rates = [float(schedule(i)) for i in iterations]
  assert iterations[int(np.argmax(rates))] == 3999  # The 4000th update is the peak.
  assert all(np.diff(rates[:100]) > 0) and all(np.diff(rates[100:]) < 0)


def test_optimizer_uses_paper_adam_and_schedule():
  hp = registry.hparams("transformer_base")
  opt = optimization.make_optimizer(hp)
  assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.98, 1e-9)
  np.testing.assert_allclose(float(opt.learning_rate), paper_lrate(1), rtol=1e-6)


def test_constant_multiplier_and_schedule_config():
  schedule = optimization.NoamSchedule(256, 100, constant=2.0)
  np.testing.assert_allclose(float(schedule(9)), 2.0 * paper_lrate(10, 256, 100), rtol=1e-6)
  assert optimization.NoamSchedule(**schedule.get_config()).get_config() == schedule.get_config()
