"""Registered models."""

from t2tlite.models.transformer import Transformer

__all__ = ["Transformer"]
