"""Freed host memory is reused without page faults when `lra` keeps it (lra/host_memory.py)."""
import os
import subprocess
import sys

import pytest

# Allocates, fills and frees 256 MB twice with malloc (as XLA does; numpy would ask for huge
# pages); prints the page faults of the second round.
PROGRAM = """
import ctypes, resource
from lra import host_memory
print(host_memory.keep_freed_memory(), end=" ")
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
for round in range(2):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  block = libc.malloc(2**28)
  ctypes.memset(block, 1, 2**28)
  libc.free(block)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_block_is_reused_without_page_faults():
  faults = {}
  for switch in ("1", "0"):
    env = {**os.environ, "LRA_KEEP_FREED_MEMORY": switch}
    for key in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX"):
      env.pop(key, None)
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    faults[switch] = (out[0], int(out[1]))
  pages = 2**28 // 4096
  assert faults["0"][0] == "False" and faults["0"][1] > pages // 2  # mapped and zeroed afresh
  assert faults["1"][0] == "True" and faults["1"][1] < pages // 100  # the same pages again
