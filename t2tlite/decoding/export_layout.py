"""An export directory's layout: its versions, their numbers, what may be written there.

Layout (TF Serving's): `DIR/<version>/saved_model.pb`, `variables/`, `assets/`
(the vocabulary) and `assets.extra/t2tlite_export.json` (what was exported).
The version is `10 * step + source`, source 0 for a checkpoint of the run, 1
for an average (t2t-avg-all's `averaged/`), 2 for a checkpoint elsewhere, 3 for
an average of the best (`averaged_best/`): the averages and the plain
checkpoint of one step get different versions, and TF Serving's "latest" (the
highest) prefers later steps, then the averages. A version is written beside its
final name and renamed into place (export.py), so a server watching DIR never loads
half an export; an existing version is replaced only when asked.

Apart from export.py (which needs TensorFlow) so that t2t-exporter and t2t-decoder check
a directory before TensorFlow loads: a mistake is a one-line error in a moment.
"""

import os

from t2tlite.errors import UserError

INFO_FILE = os.path.join("assets.extra", "t2tlite_export.json")


class ExportError(UserError):
  """A bad export directory or an export that would replace one; one line naming it."""


def export_version(checkpoint_path: str, output_dir: str, step: int) -> int:
  """`10 * step + source` (module docstring); `step` is the checkpoint's."""
  from t2tlite.training import averaging
  where = os.path.dirname(os.path.abspath(checkpoint_path))
  run = os.path.abspath(output_dir)
  if where == run:
    source = 0
  elif where == os.path.join(run, averaging.AVERAGED_DIR):
    source = 1
  elif where == os.path.join(run, averaging.AVERAGED_BEST_DIR):
    source = 3
  else:
    source = 2
  return 10 * step + source


def check_export_dir(export_dir: str) -> None:
  """A one-line error unless export_dir is a directory or can become one."""
  if os.path.exists(export_dir) and not os.path.isdir(export_dir):
    raise ExportError(f"--export_dir={export_dir}: is a file, not a directory")
  parent = os.path.dirname(os.path.abspath(export_dir))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise ExportError(f"--export_dir={export_dir}: {parent} is a file, not a directory")


def check_free(export_dir: str, version: int) -> None:
  """A one-line error if `export_dir/<version>` exists (it is replaced only when asked)."""
  target = os.path.join(export_dir, str(version))
  if os.path.exists(target):
    raise ExportError(f"{target} exists; pass --overwrite to replace it (or --version=N)")


def resolve(path: str) -> str:
  """A version directory, or the newest version (highest number) of an export directory."""
  if os.path.exists(os.path.join(path, "saved_model.pb")):
    return path
  if not os.path.isdir(path):
    raise ExportError(f"--export_dir={path}: no such directory")
  versions = [d for d in os.listdir(path) if d.isdigit()
              and os.path.exists(os.path.join(path, d, "saved_model.pb"))]
  if not versions:
    raise ExportError(f"--export_dir={path}: no saved_model.pb in it or in a version directory")
  return os.path.join(path, max(versions, key=int))
