"""runtime/memory.py: after `keep_freed_memory`, an array the size of a training step's activations reuses
the memory the last one freed, instead of faulting in fresh pages from the kernel."""

from __future__ import annotations

import subprocess
import sys

import pytest

FAULTS = """
import resource, sys
import numpy as np
from dl.runtime import memory
if sys.argv[1] == "kept":
    assert memory.keep_freed_memory() and memory.keep_freed_memory()  # once, then nothing more to do
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def step():  # a training step: six 512 KB arrays made and written, then dropped together
    kept = [np.ones(1 << 17, np.float32) for _ in range(6)]
for _ in range(3):  # warm: the heap has grown to what a step needs
    step()
before = faults()
for _ in range(20):
    step()
print(faults() - before)
"""


def page_faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True).stdout
    return int(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_arrays_are_reused_without_page_faults() -> None:
    # glibc's own settings give the freed memory back, and each step faults much of it in again
    assert page_faults("default") >= 20 * 128
    assert page_faults("kept") < 20
