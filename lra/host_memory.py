"""Host memory settings for CPU training: keep freed memory for reuse instead of unmapping it.

XLA's CPU runtime allocates each step's temporaries (gigabytes at LRA sizes) and frees them at the
end of the step. glibc serves blocks that large with mmap and returns them with munmap, so every
step the kernel maps and zeroes them afresh: a quarter of the step's CPU time went to page faults
(`lra bench` at Latte, 4 layers, D=128, batch 32, T=2000). Served from the heap and never trimmed,
the same pages are reused from step to step. The cost: the process keeps its peak memory.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

# glibc's mallopt parameters (malloc.h) and the environment variables that set them at start-up,
# for the processes this one starts (spawned bench workers, subprocesses).
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
# A trim threshold of -1 reads as the largest size_t in glibc: never trim.
_KEEP = {_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: -1, _M_ARENA_MAX: 1}
ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**62), "MALLOC_ARENA_MAX": "1"}


OFF_SWITCH = "LRA_KEEP_FREED_MEMORY"  # =0: glibc's defaults (to measure the difference)


def keep_freed_memory() -> bool:
  """Large blocks from the heap, no trimming, one arena (large blocks of other threads' arenas
  are mmapped whatever the settings). Returns whether the settings are on: not with
  LRA_KEEP_FREED_MEMORY=0, nor where there is no glibc (macOS, musl)."""
  if os.environ.get(OFF_SWITCH, "1") == "0":
    return False
  os.environ.update({k: v for k, v in ENV.items() if k not in os.environ})
  try:
    mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
  except (OSError, AttributeError):
    return False
  return all(mallopt(param, value) == 1 for param, value in _KEEP.items())
