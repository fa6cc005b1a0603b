"""Entry point: ``python -m results <command>``."""

import sys

from results.cli import main

sys.exit(main())
