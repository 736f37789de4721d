"""``python -m jupyter_pause.cli``: the same as ``jupyter pause``."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
