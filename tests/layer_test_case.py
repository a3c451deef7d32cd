"""One helper that every layer test calls (the KerasHub test_case pattern).

It checks what every Keras layer here must guarantee: `get_config` covers
every constructor argument (a layer rebuilt from its config computes the same
function once given the same weights), the output shape is as documented, and
the layer owns the expected number of trainable weights.
"""

import numpy as np


def run_layer_test(layer_cls, init_kwargs, inputs, call_kwargs=None,
                   expected_output_shape=None, expected_num_trainable_weights=None):
  call_kwargs = call_kwargs or {}
  layer = layer_cls(**init_kwargs)
  output = layer(*inputs, **call_kwargs)
  if expected_output_shape is not None:
    assert tuple(output.shape) == tuple(expected_output_shape)
  if expected_num_trainable_weights is not None:
    assert len(layer.trainable_weights) == expected_num_trainable_weights

  config = layer.get_config()
  clone = layer_cls.from_config(config)
  assert clone.get_config() == config
  clone(*inputs, **call_kwargs)  # Build, then copy weights by position.
  assert len(clone.weights) == len(layer.weights)
  clone.set_weights(layer.get_weights())
  np.testing.assert_allclose(np.asarray(clone(*inputs, **call_kwargs)), np.asarray(output),
                             rtol=1e-5, atol=1e-5)
  return layer, output
