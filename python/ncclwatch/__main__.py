"""python -m ncclwatch: the `ncclwatch` command."""

import sys

from ncclwatch._cli import main

sys.exit(main())
