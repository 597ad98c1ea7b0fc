"""``python -m taps_core``: see :mod:`taps_core.cli.main`."""

import sys

from taps_core.cli.main import main

sys.exit(main())
