"""Freed memory kept in the heap (dgrpo.training.heap): a large tensor allocated again maps no new pages."""

import subprocess
import sys

import pytest

CHILD = """
import resource, sys, torch
from dgrpo.training.heap import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
for _ in range(10):  # 100 MB blocks: the heap settles (glibc's first frees of such blocks are not kept yet)
    torch.empty(25_000_000).fill_(1.0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    torch.empty(25_000_000).fill_(1.0)  # allocated, touched, freed
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_block_is_reused_without_new_pages():
    kept, with_heap = faults("keep")
    _, without = faults("plain")
    pages = 5 * 100_000_000 // 4096  # what five fresh 100 MB mappings fault in (4 KiB pages)
    assert kept == "True"
    assert without > 0.9 * pages  # glibc maps and unmaps each block: every page faults again
    assert with_heap < 0.1 * pages  # the heap's pages are already there
