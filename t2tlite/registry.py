"""Name -> object registries for problems, hparams sets and models.

Everything a user can name on the command line (`--problem`, `--hparams_set`,
`--model`) is registered here by a decorator at import time of the module that
defines it, as in tensor2tensor's `utils/registry.py`. A failed lookup names the
closest registered names, so a typo costs one glance, not a grep.
"""

import difflib
import importlib
import os
import sys
from typing import Callable, Dict, List, Optional

from t2tlite.errors import UserError


class RegistryError(UserError, KeyError):
  """A lookup or registration failed; the message is one line for the user."""

  def __str__(self):  # KeyError would wrap the message in quotes.
    return str(self.args[0])


class Registry:
  """One kind of registered thing ("problem", "hparams set", "model")."""

  def __init__(self, kind: str):
    self.kind = kind
    self._entries: Dict[str, object] = {}

  def register(self, name: Optional[str] = None) -> Callable:
    """Decorator: `@REG.register()` uses the object's `__name__` (snake case for classes)."""

    def decorator(obj):
      key = name or _default_name(obj)
      if key in self._entries and self._entries[key] is not obj:
        raise RegistryError(f"{self.kind} '{key}' is already registered")
      self._entries[key] = obj
      if isinstance(obj, type):
        obj.registered_name = key  # Lets an instance name itself (e.g. shard file names).
      return obj

    return decorator

  def get(self, name: str):
    if name not in self._entries:
      close = difflib.get_close_matches(name, self._entries, n=3, cutoff=0.5)
      hint = f"; did you mean {', '.join(close)}?" if close else ""
      raise RegistryError(
          f"unknown {self.kind} '{name}'{hint} (--registry_help lists all "
          f"{len(self._entries)})")
    return self._entries[name]

  def names(self) -> List[str]:
    return sorted(self._entries)

  def __contains__(self, name: str) -> bool:
    return name in self._entries


PROBLEMS = Registry("problem")
HPARAMS = Registry("hparams set")
MODELS = Registry("model")


def register_problem(name: Optional[str] = None):
  return PROBLEMS.register(name)


def register_hparams(name: Optional[str] = None):
  return HPARAMS.register(name)


def register_model(name: Optional[str] = None):
  return MODELS.register(name)


def problem(name: str):
  """Returns an instance of the registered problem class."""
  load_all()
  return PROBLEMS.get(name)()


def hparams(name: str):
  """Returns a fresh HParams from the registered set function."""
  load_all()
  return HPARAMS.get(name)()


def model(name: str):
  """Returns the registered model class."""
  load_all()
  return MODELS.get(name)


def load_all() -> None:
  """Imports the modules whose decorators fill the registries."""
  for module in ("t2tlite.problems", "t2tlite.hparams", "t2tlite.models"):
    importlib.import_module(module)


def import_usr_dir(usr_dir: Optional[str]) -> None:
  """Imports a user directory of extra problems/hparams/models (t2t's --t2t_usr_dir)."""
  if not usr_dir:
    return
  path = os.path.abspath(os.path.expanduser(usr_dir))
  if not os.path.isdir(path):
    raise RegistryError(f"--t2t_usr_dir: no such directory: {usr_dir}")
  parent, module = os.path.split(path.rstrip("/"))
  if parent not in sys.path:
    sys.path.insert(0, parent)
  importlib.import_module(module)


def help_string() -> str:
  """What `--registry_help` prints: every registered name, by kind."""
  load_all()
  lines = []
  for reg in (PROBLEMS, HPARAMS, MODELS):
    lines.append(f"{reg.kind}s ({len(reg.names())}):")
    lines.extend(f"  {n}" for n in reg.names())
  return "\n".join(lines)


def _default_name(obj) -> str:
  name = obj.__name__
  if isinstance(obj, type):  # CamelCase class -> snake_case, as in t2t.
    out = []
    for i, ch in enumerate(name):
      if ch.isupper() and i and not name[i - 1].isupper():
        out.append("_")
      out.append(ch.lower())
    name = "".join(out)
  return name
