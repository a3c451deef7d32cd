"""The atomic writer: all of a file or none of it, and no temporary files left behind."""

import errno
import os

import pytest

from t2tlite import errors, files


def test_atomic_write_replaces_only_on_success(tmp_path):
  path = str(tmp_path / "out.txt")
  with files.atomic_write(path) as f:
    f.write("first\n")
  with pytest.raises(RuntimeError):
    with files.atomic_write(path) as f:
      f.write("second, half written")
      raise RuntimeError("killed")
  assert open(path).read() == "first\n"
  assert os.listdir(tmp_path) == ["out.txt"]  # The failed write's temp file is gone.


def test_atomic_paths_renames_every_file_together(tmp_path):
  paths = [str(tmp_path / "a"), str(tmp_path / "sub" / "b")]
  with files.atomic_paths(paths) as tmps:
    for tmp in tmps:
      open(tmp, "w").write("x")
    assert not any(os.path.exists(p) for p in paths)  # Nothing visible before the end.
  assert all(open(p).read() == "x" for p in paths)


def test_remove_incomplete_deletes_only_leftovers(tmp_path):
  (tmp_path / "keep.txt").write_text("a")
  (tmp_path / "x.txt.incomplete").write_text("b")
  removed = files.remove_incomplete(str(tmp_path))
  assert [os.path.basename(p) for p in removed] == ["x.txt.incomplete"]
  assert os.listdir(tmp_path) == ["keep.txt"]


def test_disk_full_is_described_with_its_path():
  error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "runs/x/ckpt-5.data")
  assert errors.is_user_os_error(error)
  assert errors.describe_os_error(error).startswith("runs/x/ckpt-5.data: No space left on device")
  assert not errors.is_user_os_error(OSError(errno.EIO, "I/O error"))
