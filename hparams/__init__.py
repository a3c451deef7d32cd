"""Registered hyper-parameter sets (`transformer.py`; Table 3 in miniature: `table3.py`).

The record itself is t2tlite.hparams_record.

`HParams` and `HParamsError` are re-exported here for code written against
the old location, `t2tlite.hparams.hparams`.
"""

from t2tlite.hparams import transformer  # noqa: F401 (registers the sets)
from t2tlite.hparams import table3  # noqa: F401 (registers the miniatures; after transformer)
from t2tlite.hparams_record import HParams, HParamsError

__all__ = ["HParams", "HParamsError"]
