"""`python scripts/bench/tree_memory.py -- COMMAND ...`: run COMMAND and sample, every --interval seconds, the summed
proportional set size (PSS, /proc/<pid>/smaps_rollup) of its process tree. This process is made the subreaper of
that tree, so what daemonises under it (Ray's daemons, workers and vLLM's engine, where no dara.train is the
subreaper) stays in it; other work on the machine is not counted. Prints the command's wall time and the peak
summed PSS at the end, and writes both to --out as JSON when given. With --pid it measures an already running
process's tree instead, until that process ends. Linux only."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from dara.io import atomic_write_json
from dara.reaper import adopt_orphans, descendants, running


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def tree_pss_kib(root: int, with_root: bool) -> int:
    """Summed PSS of the descendants of ``root`` (and of ``root`` itself when ``with_root``)."""
    total = 0
    for pid in descendants(root) + ([root] if with_root else []):
        try:
            total += pss_kib(pid)
        except (OSError, ValueError, IndexError):
            continue  # a process that ended while being read
    return total


def wait_for_exit(pid: int, interval: float) -> None:
    """Wait for a process that is not this one's child to end."""
    while running(pid):
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON result, rewritten whenever the peak rises (finished: false until the end)")
    parser.add_argument("--pid", type=int, default=None,
                        help="measure the tree of this running process until it ends (a race already under way), "
                             "instead of running a command")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == (args.pid is not None):
        parser.error("give either a command after -- or --pid")
    if args.pid is not None and not running(args.pid):
        parser.error(f"--pid {args.pid}: no such process")
    root = args.pid if args.pid is not None else os.getpid()
    if args.pid is None:
        adopt_orphans()
    result = {"command": command or f"pid {args.pid}", "interval_s": args.interval, "finished": False,
              "exit_code": None, "wall_s": None, "peak_summed_pss_gib": 0.0}
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            pss = tree_pss_kib(root, with_root=args.pid is not None)
            if pss > peak[0]:
                peak[0] = pss
                result["peak_summed_pss_gib"] = round(pss / 2**20, 2)
                if args.out:
                    atomic_write_json(args.out, result)
            done.wait(args.interval)

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    sampler.start()
    if command:
        result["exit_code"] = subprocess.call(command)
    else:
        wait_for_exit(args.pid, args.interval)
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    result.update(finished=True, wall_s=round(wall, 1))
    print(f"[tree_memory] exit {result['exit_code']}, wall {wall / 60:.1f} min, peak summed PSS "
          f"{result['peak_summed_pss_gib']} GiB", flush=True)
    if args.out:
        atomic_write_json(args.out, result)
    return result["exit_code"] or 0


if __name__ == "__main__":
    sys.exit(main())
