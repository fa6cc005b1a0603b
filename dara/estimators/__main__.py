"""`python -m dara.estimators list [--module PATH ...]`: every registered estimator, its summary, the
batch_norm modes it takes, the library options it reads and the options it declares (`--module` loads a
module of estimators of your own first, as `algorithm.dara.estimator_module` does in training)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from .config import DEFAULT_BATCH_NORM, DaraAlgoConfig
from .registry import ESTIMATORS, Estimator, EstimatorModuleError, load_estimator_module

_DEFAULTS = {f.name: getattr(DaraAlgoConfig(), f.name) for f in fields(DaraAlgoConfig)}


def describe(estimator: Estimator) -> list[str]:
    """The lines `list` prints for one estimator."""
    own, *others = estimator.batch_norms or ("",)
    modes = (own + (f" (default), {', '.join(others)}" if others else " only") if own
             else f"any of token, response, none ({DEFAULT_BATCH_NORM} by default)")
    lines = [f"{estimator.name}: {estimator.summary}", f"    batch_norm: {modes}"]
    if estimator.uses:
        used = [f"{name} ({_DEFAULTS[name]!r})" if _DEFAULTS.get(name) not in (None, {}) else name
                for name in estimator.uses]
        lines.append(f"    reads: {', '.join(used)}")
    if estimator.needs_ranges:
        lines.append("    needs: reward_ranges for every channel")
    if estimator.options:
        lines.append(f"    options: {'; '.join(o.describe() for o in estimator.options)}")
    if not estimator.builtin:
        lines.append(f"    from: {estimator.module}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dara.estimators", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="every registered estimator with its summary, modes and options")
    listing.add_argument("--module", action="append", default=[], metavar="PATH",
                         help="a module of estimators of your own to load first (repeatable)")
    try:
        for spec in parser.parse_args(argv).module:
            load_estimator_module(spec)
    except EstimatorModuleError as error:
        print(f"[dara.estimators] {error}", file=sys.stderr)
        return 2
    print("\n".join(line for estimator in ESTIMATORS.values() for line in describe(estimator)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
