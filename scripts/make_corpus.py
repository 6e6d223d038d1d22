"""Write stdlib/data/corpus.txt.gz, the text behind `text_corpus` (stdlib/data/README.md): the help topics of the
Python that runs this script (`pydoc_data.topics`, joined in sorted order of their names, as UTF-8), gzip-compressed
with no time stamp, so that the same text makes the same bytes; and beside it that Python's licence.

It was run once, with Python 3.11.7, and is not run again: `text_corpus(n)` must give the same bytes on every
machine and every Python (whose help topics differ from version to version), or the examples' outputs
(charrnn.dl, gpt.dl) would change with them.

    python scripts/make_corpus.py
"""

from __future__ import annotations

import gzip
import shutil
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "stdlib" / "data"


def main() -> None:
    from pydoc_data.topics import topics

    text = "".join(topics[key] for key in sorted(topics)).encode("utf-8")
    (DATA / "corpus.txt.gz").write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
    shutil.copyfile(Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt", DATA / "corpus-LICENSE.txt")
    version = sys.version.split()[0]
    print(f"corpus.txt.gz: {len(text):,} bytes of Python {version}'s help topics; corpus-LICENSE.txt: its licence")


if __name__ == "__main__":
    main()
