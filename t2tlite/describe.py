"""One-line descriptions for `--registry_help` and the key table for `--hparams_help`.

Both are read from the code itself, so they cannot drift from it: a
registered thing's description is its docstring's first line; an hparams set
without one (the Table 3 rows are one-liners over their parent) is described
by what it changes from the set it calls; an HParams key's help is the
trailing `# ...` comment on its dataclass field, read from the source file
that defines the class (wherever that is), with the `# --- Section ---`
comments as headings.
"""

import ast
import dataclasses
import inspect
import io
import re
import tokenize
import typing
from typing import Dict, List, Optional, Tuple

from t2tlite import registry

_PARENT_CALL = re.compile(r"return\s+(\w+)\(\)\s*\.\s*replace\(")


def one_line(obj, hparams_set: Optional[str] = None) -> str:
  """First docstring line of `obj`; for a docstring-less hparams set, its change from its parent."""
  own_doc = obj.__doc__ if not isinstance(obj, type) else obj.__dict__.get("__doc__")
  if own_doc and own_doc.strip():
    return own_doc.strip().splitlines()[0].strip()
  if hparams_set is not None:
    generated = set_description(obj)
    if generated:
      return generated
  doc = inspect.getdoc(obj)  # A class without its own docstring: its base's.
  return doc.splitlines()[0].strip() if doc else ""


def set_description(fn) -> str:
  """"<parent> with k=v, ..." for a set written as `return parent().replace(k=v, ...)`.

  The values are the ones that really differ (calling both sets), and the
  `# --- ...` comment heading the set's block in its module (e.g. "Table 3
  row (A): ...") follows in brackets.
  """
  try:
    source = inspect.getsource(fn)
  except (OSError, TypeError):
    return ""
  match = _PARENT_CALL.search(source)
  if not match or match.group(1) not in registry.HPARAMS:
    return ""
  parent = match.group(1)
  mine, theirs = fn().to_dict(), registry.hparams(parent).to_dict()
  changes = ", ".join(f"{k}={v}" for k, v in mine.items() if theirs.get(k) != v)
  text = f"{parent} with {changes}" if changes else f"same as {parent}"
  heading = _section_heading(fn)
  return f"{text} [{heading}]" if heading else text


def _section_heading(fn) -> str:
  """The nearest `# --- text` comment above `fn`'s definition in its module ("" if none)."""
  try:
    lines, start = inspect.findsource(fn)
  except (OSError, TypeError):
    return ""
  for line in reversed(lines[:start]):
    stripped = line.strip()
    if stripped.startswith("# ---"):
      return stripped.lstrip("#- ").rstrip("-. ").strip()
  return ""


@dataclasses.dataclass(frozen=True)
class FieldHelp:
  name: str
  type_name: str
  default: object
  comment: str
  section: str


def field_comments(cls) -> Tuple[Dict[str, str], Dict[str, str]]:
  """({field: trailing comment}, {field: section heading}) read from `cls`'s source file.

  The file is found with `inspect.getsourcefile(cls)` and parsed with `ast`
  (for the fields' lines) and `tokenize` (for the comments, which ast drops).
  """
  path = inspect.getsourcefile(cls)
  with open(path, encoding="utf-8") as f:
    source = f.read()
  comments: Dict[int, str] = {}
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.COMMENT:
      comments[token.start[0]] = token.string.lstrip("#").strip()
  lines = source.splitlines()
  trailing, sections = {}, {}
  for node in ast.walk(ast.parse(source)):
    if not (isinstance(node, ast.ClassDef) and node.name == cls.__name__):
      continue
    section = ""
    previous_end = node.lineno  # The `class` line: headings may precede the first field.
    for item in node.body:
      for line_no in range(previous_end + 1, item.lineno):  # Comment lines between fields.
        text = comments.get(line_no, "")
        if lines[line_no - 1].strip().startswith("#") and text.startswith("---"):
          section = text.strip("- ").strip()
      previous_end = item.end_lineno
      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
        trailing[item.target.id] = comments.get(item.end_lineno, "")
        sections[item.target.id] = section
    break
  return trailing, sections


def hparams_fields(cls) -> List[FieldHelp]:
  """Every field of the dataclass `cls`, in order, with type, default and comment."""
  hints = typing.get_type_hints(cls)
  trailing, sections = field_comments(cls)
  out = []
  for field in dataclasses.fields(cls):
    default = field.default
    if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
      default = field.default_factory()
    kind = hints.get(field.name, field.type)
    out.append(FieldHelp(field.name, getattr(kind, "__name__", str(kind)), default,
                         trailing.get(field.name, ""), sections.get(field.name, "")))
  return out


def hparams_help(cls) -> str:
  """What `--hparams_help` prints: `key (type, default value): comment`, grouped by section."""
  lines = [f"--hparams keys (the fields of {cls.__module__}.{cls.__name__}); "
           "override with --hparams=key=value,key=value:"]
  section = None
  for f in hparams_fields(cls):
    if f.section != section:
      section = f.section
      lines.append(f"{section}:" if section else "")
    lines.append(f"  {f.name} ({f.type_name}, default {f.default!r}): {f.comment}".rstrip(": "))
  return "\n".join(lines)


def registry_help() -> str:
  """What `--registry_help` prints: every registered name with one line saying what it is.

  The line is the first line of the object's docstring (for an hparams set
  without one, what it changes from its parent: `set_description`);
  aliases follow their canonical name.
  """
  registry.load_all()
  lines = []
  for reg in (registry.PROBLEMS, registry.HPARAMS, registry.MODELS):
    names = reg.names()
    lines.append(f"{reg.kind}s ({len(names)}):")
    width = max((len(n) for n in names), default=0)
    for name in names:
      text = one_line(reg.get(name), name if reg is registry.HPARAMS else None)
      lines.append(f"  {name:<{width}}  {text}".rstrip())
      for alias, note in reg.aliases_of(name):
        lines.append(f"    alias {alias}" + (f": {note}" if note else ""))
  return "\n".join(lines)
