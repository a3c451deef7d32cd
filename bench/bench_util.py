"""Helpers every benchmark script shares: flag parsing and a description of the machine.

Benchmarks run as scripts (`python bench/NAME.py`), so this module is imported
from the script's own directory.
"""

import argparse
import os
import platform


def str2bool(v):
  if isinstance(v, bool):
    return v
  if v.lower() in ("1", "true", "yes", "on"):
    return True
  if v.lower() in ("0", "false", "no", "off"):
    return False
  raise argparse.ArgumentTypeError(f"expected true/false, got {v!r}")


def machine_info():
  model = ""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
    with open("/proc/cpuinfo") as f:
      flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
  except OSError:
    flags = []
  return dict(nproc=os.cpu_count(), cpu_model=model, platform=platform.platform(),
              python=platform.python_version(),
              cpu_flags_of_note=[x for x in flags if x in ("avx512f", "avx512_bf16", "amx_bf16",
                                                            "amx_tile", "avx512_vnni")])
