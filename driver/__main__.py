import sys

from dl import main

sys.exit(main())
