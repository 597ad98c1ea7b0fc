"""``python -m validation`` entry point (see :mod:`validation.cli`)."""

import sys

from validation.cli import main

sys.exit(main())
