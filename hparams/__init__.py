"""Hyper-parameters: the HParams record (`hparams.py`) and the registered sets."""

from t2tlite.hparams.hparams import HParams, HParamsError
from t2tlite.hparams import transformer  # registers the sets

__all__ = ["HParams", "HParamsError"]
