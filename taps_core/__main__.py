"""``python -m taps_core``: see :mod:`taps_core.cli`."""

import sys

from taps_core.cli import main

sys.exit(main())
