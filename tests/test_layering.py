"""Imports point into the core: t2tlite/ never imports the top-level problems/, hparams/, bin/."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP_LEVEL = ("t2tlite.problems", "t2tlite.hparams", "t2tlite.bin")


def _imports(path):
  """Every module name imported anywhere in the file (functions included)."""
  for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      yield node.module
      yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _python_files(folder):
  for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
    yield from (os.path.join(dirpath, n) for n in names if n.endswith(".py"))


def test_the_core_imports_no_top_level_folder():
  upward = [(os.path.relpath(path, ROOT), name) for path in _python_files("t2tlite")
            for name in _imports(path)
            if any(name == top or name.startswith(top + ".") for top in TOP_LEVEL)]
  assert upward == []


def test_training_imports_no_decoding():
  """decoding/ loads runs through training/ (run_dir, averaging): the trainer's dev decoding
  is handed to it (decoding/dev_decoding.py), never imported, so the import graph has no cycle."""
  upward = [(os.path.relpath(path, ROOT), name)
            for path in _python_files(os.path.join("t2tlite", "training"))
            for name in _imports(path) if name.startswith("t2tlite.decoding")]
  assert upward == []


def _private_uses(path):
  """`from t2tlite.x import _name`, and `module._name` where `module` is an imported t2tlite module."""
  tree = ast.parse(open(path, encoding="utf-8").read())
  modules = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("t2tlite"):
      for alias in node.names:
        if alias.name.startswith("_") and not alias.name.startswith("__"):
          yield f"{node.module}.{alias.name}"
        modules.add(alias.asname or alias.name)
    elif isinstance(node, ast.Import):
      modules.update(a.asname for a in node.names if a.name.startswith("t2tlite") and a.asname)
  for node in ast.walk(tree):
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id in modules and node.attr.startswith("_")
        and not node.attr.startswith("__")):
      yield f"{node.value.id}.{node.attr}"


def test_no_private_name_is_used_across_modules():
  private = [(os.path.relpath(path, ROOT), name)
             for folder in ("t2tlite", "problems", "hparams", "bin", "bench")
             for path in _python_files(folder) for name in _private_uses(path)]
  assert private == []


def test_bench_needs_the_install_not_sys_path_edits():
  edits = [os.path.relpath(path, ROOT) for path in _python_files("bench")
           if "sys.path.insert" in open(path, encoding="utf-8").read()
           or "sys.path.append" in open(path, encoding="utf-8").read()]
  assert edits == []
