"""The one family of errors a user can fix: every command prints them as one line, exit 2.

Each stage raises its own subclass (so a library caller can tell a bad
vocabulary from a bad run directory), but the commands catch only
`UserError`, plus the few OSErrors a user fixes (disk full, no permission),
which `describe_os_error` turns into one line naming the path.
"""

import errno
import re

# OS errors that mean "the user can fix this" (free space, fix permissions, fix a path).
USER_OS_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS,
                  errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EFBIG)


class UserError(ValueError):
  """Something the user can fix (a flag, a file, a run directory); the message is one line."""


def is_user_os_error(error: BaseException) -> bool:
  return isinstance(error, OSError) and error.errno in USER_OS_ERRNOS


def describe_os_error(error: OSError) -> str:
  """"<path>: <reason>" for an OSError, e.g. "runs/x/ckpt-5.data: No space left on device"."""
  path = error.filename or ""
  reason = error.strerror or str(error)
  if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
    reason += " (free some space and rerun: the run resumes from its last checkpoint)"
  return f"{path}: {reason}" if path else reason


_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "File too large")


def one_line(error: BaseException):
  """The one line a command prints for `error`, or None when it is a bug (a traceback).

  UserError; an OSError the user fixes (named path); and TensorFlow's own
  write errors on a full disk, which are not OSErrors but name the path in
  their message (checked by type name, so TensorFlow need not be loaded).
  """
  if isinstance(error, UserError):
    return (str(error).splitlines() or [type(error).__name__])[0]
  if is_user_os_error(error):
    return describe_os_error(error)
  if isinstance(error, UnicodeDecodeError):
    return f"input is not UTF-8 text ({error.reason} at byte {error.start})"
  message = " ".join(str(getattr(error, "message", "") or "").split())
  if not type(error).__module__.startswith("tensorflow"):
    return None
  found = re.search(r"(\S+); (" + "|".join(_DISK_FULL_TEXT) + ")", message)
  if found:  # e.g. "runs/x/ckpt-5_temp/part-00000...; No space left on device [Op:SaveV2]"
    return (f"{found.group(1)}: {found.group(2)} (free some space and rerun: the run resumes "
            "from its last checkpoint)")
  return None
