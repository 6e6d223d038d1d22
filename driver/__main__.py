import sys

from dl.cli import main

sys.exit(main())
