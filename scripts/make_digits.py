"""Write stdlib/data/digits.npz, the dataset behind DL's `digits()` built-in.

It holds scikit-learn's copy of the UCI "Optical Recognition of Handwritten Digits"
test set (E. Alpaydin and C. Kaynak; CC BY 4.0, see stdlib/data/README.md): 1,797
images of 8x8 pixels with values 0..16, and their labels 0..9. The file has two
arrays, `images` (uint8, [1797, 64]) and `labels` (uint8, [1797]), and no pickled
objects, so it loads with `numpy.load(path, allow_pickle=False)`.

scikit-learn is not a dependency of DL; run this once, in a throwaway environment:

    python3 -m venv /tmp/skvenv && /tmp/skvenv/bin/pip install scikit-learn numpy
    /tmp/skvenv/bin/python scripts/make_digits.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

TARGET = Path(__file__).resolve().parent.parent / "stdlib" / "data" / "digits.npz"
COUNT, PIXELS, CLASSES, LARGEST = 1797, 64, 10, 16


def main() -> None:
    digits = load_digits()
    images = digits.data.astype(np.uint8)
    labels = digits.target.astype(np.uint8)
    if not np.array_equal(images, digits.data) or not np.array_equal(labels, digits.target):
        raise SystemExit("the digits do not fit in uint8")
    if images.shape != (COUNT, PIXELS) or labels.shape != (COUNT,):
        raise SystemExit(f"unexpected shapes {images.shape}, {labels.shape}")
    if images.max() > LARGEST or set(np.unique(labels)) != set(range(CLASSES)):
        raise SystemExit("unexpected pixel values or labels")
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(TARGET, images=images, labels=labels)
    print(f"wrote {TARGET} ({TARGET.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
