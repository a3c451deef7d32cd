"""Keras layers of the Transformer, one responsibility per module."""
