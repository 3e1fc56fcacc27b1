"""Keep freed memory in the process heap for reuse, instead of giving it back to the system (glibc only).

glibc's ``malloc`` serves a block of 32 MiB or more (its dynamic mmap threshold) with its own ``mmap``
and unmaps it on ``free``, so every allocation of that size maps fresh pages that the kernel zero-fills
on first touch. A GRPO update allocates and frees such tensors over and over: the tied embedding's
dense gradient (49,152 × 576 float32 = 113 MB for SmolLM2, once per group's backward), the (G, T, V)
logits and their gradients. Measured on the README round's update at one thread
(``results/readme_time_h38f/``): 1.2–1.4 million minor page faults and 1.6–1.9 s of system CPU per
update, against none and 0.01–0.03 s when freed memory stays in the heap (``mallopt``: mmap threshold
1 GiB, trim threshold 2 GiB); user CPU rose by 0.3–0.6 s, so the update costs about 1 CPU second
(7 %) less: 14.0 → 13.0 s on average. Where memory lives does not change any
computed value (PyTorch aligns its buffers to 64 bytes either way).

Source: ``mallopt(3)``, ``M_MMAP_THRESHOLD`` (-3) and ``M_TRIM_THRESHOLD`` (-1).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 1 << 30  # blocks below 1 GiB come from the heap (glibc caps the threshold at 32 MiB x 2 ** n)
TRIM_THRESHOLD = 1 << 31  # up to 2 GiB of free heap top is kept for reuse


def keep_freed_memory() -> bool:
    """Tell glibc to serve blocks under 1 GiB from the heap and keep up to 2 GiB of freed memory for reuse.

    Returns:
        True when set; False on a system without glibc's ``mallopt`` (nothing changes there).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        log.debug("mallopt refused the heap thresholds; freed memory goes back to the system as before")
    return ok
