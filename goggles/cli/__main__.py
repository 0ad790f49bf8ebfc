"""``python -m goggles.cli``."""

import sys

from goggles.cli import main

sys.exit(main())
