"""`python -m anges`: the same as the `anges` command."""

import sys

from anges.cli import main

sys.exit(main())
