"""``python -m msgstore.cli``."""

import sys

from . import main

sys.exit(main())
