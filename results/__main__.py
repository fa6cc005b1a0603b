"""Entry point: ``python -m results <command>``."""
from results.cli import main

raise SystemExit(main())
