"""Entry point: ``python -m results.evaluation``."""
from results.evaluation.cli import main

raise SystemExit(main())
