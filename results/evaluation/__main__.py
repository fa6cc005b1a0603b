"""Entry point: ``python -m results.evaluation``."""

import sys

from results.evaluation.cli import main

sys.exit(main())
