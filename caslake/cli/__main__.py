"""``python -m caslake.cli``."""

import sys

from caslake.cli.main import main

sys.exit(main())
