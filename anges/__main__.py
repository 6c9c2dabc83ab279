"""`python -m anges`: the same as the `anges` command."""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    # -m puts the working directory first on the import path: a module a command wrote there must not shadow one
    # anges imports later.
    del sys.path[0]

from anges.cli.main import main  # noqa: E402

sys.exit(main())
