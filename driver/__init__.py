"""DL: a deep-learning language with shapes in its types and `grad` as a source transform."""

import os

# The interpreter runs many small matrix products; OpenBLAS's threads make those up to a hundred times
# slower when the machine is busy (they wait for a core). One thread unless the user asks for more.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
