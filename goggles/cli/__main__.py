"""``python -m goggles.cli``: the ``goggles`` command (``goggles.console``)."""

import sys

from goggles.console import main

sys.exit(main())
