"""Entry point: `python -m dara.testbed [--quick] [--out DIR] ...` (see dara.testbed.cli)."""

from dara.testbed.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
