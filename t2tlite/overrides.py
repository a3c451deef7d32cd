"""Typed `key=value,key=value` overrides for configuration dataclasses.

Shared by `--hparams` (model/training HParams) and `--decode_hparams`
(DecodeHParams): the dataclass field types are the schema, so an unknown key,
a float given to an int field or a malformed bool is a one-line error naming
the flag, the key and the value received.
"""

import dataclasses
import difflib
import json
import typing
from typing import Any, Dict

from t2tlite.errors import UserError


class OverrideError(UserError):
  """A bad `key=value` override; the message is one line for the user."""


_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


def parse_value(flag: str, key: str, text: str, field_type: Any) -> Any:
  """Converts `text` to `field_type` (int, float, bool or str), strictly."""
  text = text.strip()
  try:
    if field_type is bool:
      low = text.lower()
      if low in _TRUE:
        return True
      if low in _FALSE:
        return False
      raise ValueError
    if field_type is int:
      return int(text)  # int("0.5") raises: no silent truncation.
    if field_type is float:
      return float(text)
    if field_type is str:
      return text
  except ValueError:
    pass
  else:
    raise OverrideError(f"{flag}: field '{key}' has unsupported type {field_type}")
  raise OverrideError(
      f"{flag}: {key}={text!r} is not a valid {field_type.__name__}")


def field_types(cls) -> Dict[str, Any]:
  hints = typing.get_type_hints(cls)
  return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def apply_overrides(config, overrides: str, flag: str = "--hparams"):
  """Returns a copy of dataclass `config` with `overrides` ("a=1,b=x") applied."""
  if not overrides or not overrides.strip():
    return config
  types = field_types(type(config))
  changes = {}
  for item in overrides.split(","):
    item = item.strip()
    if not item:
      continue
    if "=" not in item:
      raise OverrideError(f"{flag}: expected key=value, got {item!r}")
    key, text = item.split("=", 1)
    key = key.strip()
    if key not in types:
      close = difflib.get_close_matches(key, types, n=3, cutoff=0.6)
      hint = f"; did you mean {', '.join(close)}?" if close else ""
      raise OverrideError(f"{flag}: unknown key '{key}'{hint}")
    changes[key] = parse_value(flag, key, text, types[key])
  return dataclasses.replace(config, **changes)


def to_json(config) -> str:
  return json.dumps(dataclasses.asdict(config), indent=2, sort_keys=True) + "\n"


def from_dict(cls, values: Dict[str, Any], source: str):
  """Builds `cls` from a dict (e.g. a saved JSON), rejecting unknown keys."""
  types = field_types(cls)
  unknown = sorted(set(values) - set(types))
  if unknown:
    raise OverrideError(f"{source}: unknown keys {unknown}")
  for key, value in values.items():
    expected = types[key]
    ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
      value, ok = float(value), True
      values = {**values, key: value}
    if not ok:
      raise OverrideError(f"{source}: {key}={value!r} is not a {expected.__name__}")
  return cls(**values)
