"""``python -m goggles.cli``: the ``goggles`` command."""

import sys

from goggles.cli import main
from goggles.cli.common import leave

sys.exit(leave(main()))
