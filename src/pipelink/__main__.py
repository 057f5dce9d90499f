"""`python -m pipelink ...`: the same command line as `pipelink ...`."""

import sys

from .cli import main

sys.exit(main())
