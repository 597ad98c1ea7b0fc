"""``python -m taps_core``: see :mod:`taps_core.cli.main`."""

import sys

from taps_core.cli.main import main

if __name__ == "__main__":  # not when a worker process imports it (multiprocessing)
    sys.exit(main())
