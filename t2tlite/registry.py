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
from typing import Callable, Dict, List, Optional, Sequence, Tuple

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
    self._aliases: Dict[str, Tuple[str, str]] = {}  # alias -> (canonical name, note).

  def register(self, name: Optional[str] = None, aliases: Sequence[str] = ()) -> Callable:
    """Decorator: `@REG.register()` uses the object's `__name__` (snake case for classes).

    `aliases` are other names that look up the same object (see `alias`).
    """

    def decorator(obj):
      key = name or _default_name(obj)
      if (key in self._entries and self._entries[key] is not obj) or key in self._aliases:
        raise RegistryError(f"{self.kind} '{key}' is already registered")
      self._entries[key] = obj
      if isinstance(obj, type):
        obj.registered_name = key  # Lets an instance name itself (e.g. shard file names).
      for other in aliases:
        self.alias(other, key)
      return obj

    return decorator

  def alias(self, alias: str, name: str, note: str = "") -> None:
    """Makes `alias` (e.g. tensor2tensor's name for a task) look up the registered `name`.

    Lookups by alias return the canonical object (whose `registered_name` stays
    the canonical one); `--registry_help` lists the alias, with `note` (say how
    it differs, if it does), under the canonical name.
    """
    if name not in self._entries:
      raise RegistryError(f"alias '{alias}': no {self.kind} '{name}' is registered")
    if alias in self._entries or self._aliases.get(alias, (name,))[0] != name:
      raise RegistryError(f"{self.kind} '{alias}' is already registered")
    self._aliases[alias] = (name, note)

  def canonical(self, name: str) -> str:
    """The registered name `name` stands for (itself unless it is an alias)."""
    return self._aliases[name][0] if name in self._aliases else name

  def aliases_of(self, name: str) -> List[Tuple[str, str]]:
    """(alias, note) pairs that stand for `name`, sorted."""
    return sorted((a, note) for a, (n, note) in self._aliases.items() if n == name)

  def get(self, name: str):
    name = self.canonical(name)
    if name not in self._entries:
      known = list(self._entries) + list(self._aliases)
      close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
      hint = f"; did you mean {', '.join(close)}?" if close else ""
      raise RegistryError(
          f"unknown {self.kind} '{name}'{hint} (--registry_help lists all "
          f"{len(self._entries)})")
    return self._entries[name]

  def names(self) -> List[str]:
    """Canonical names only; `aliases_of` gives the others."""
    return sorted(self._entries)

  def __contains__(self, name: str) -> bool:
    return name in self._entries or name in self._aliases


PROBLEMS = Registry("problem")
HPARAMS = Registry("hparams set")
MODELS = Registry("model")


def register_problem(name: Optional[str] = None, aliases: Sequence[str] = ()):
  return PROBLEMS.register(name, aliases)


def register_hparams(name: Optional[str] = None, aliases: Sequence[str] = ()):
  return HPARAMS.register(name, aliases)


def register_model(name: Optional[str] = None, aliases: Sequence[str] = ()):
  return MODELS.register(name, aliases)


def problem(name: str):
  """Returns an instance of the registered problem class."""
  load_all()
  if _problems_unavailable:
    raise RegistryError(f"--problem={name}: problems read and write data with TensorFlow, "
                        f"which is not installed here ({_problems_unavailable}); train from "
                        "batches saved as numpy (t2t-datagen --numpy_batches=DIR, then "
                        "t2t-trainer --backend=jax --numpy_batches=DIR)")
  return PROBLEMS.get(name)()


def hparams(name: str):
  """Returns a fresh HParams from the registered set function."""
  _load("t2tlite.hparams")
  return HPARAMS.get(name)()


def model(name: str):
  """Returns the registered model class."""
  _load("t2tlite.hparams", "t2tlite.models")
  return MODELS.get(name)


_problems_unavailable = ""  # Why the problems could not load (no TensorFlow), if they could not.


def load_all() -> None:
  """Imports the modules whose decorators fill the registries.

  Without TensorFlow (a JAX-only machine) the problems cannot load; the
  hparams sets and models still do, and `problem()` says why it has none.
  """
  global _problems_unavailable
  _load("t2tlite.hparams", "t2tlite.models")
  if "t2tlite.problems" in sys.modules:
    return
  try:
    importlib.import_module("t2tlite.problems")
  except ImportError as e:
    if e.name != "tensorflow" and "tensorflow" not in str(e):
      raise
    _problems_unavailable = str(e)


def _load(*modules: str) -> None:
  """Imports what a lookup needs and no more: the problems load TensorFlow and the models
  Keras (seconds each), which a set looked up by name (a flag checked, a JAX process) never
  calls."""
  for module in modules:
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
