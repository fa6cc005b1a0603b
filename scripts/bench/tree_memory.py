"""`python scripts/bench/tree_memory.py -- COMMAND ...`: run COMMAND and sample, every --interval seconds, the summed
proportional set size (PSS, /proc/<pid>/smaps_rollup) of every process of this user that started after it (Ray's
workers and vLLM's engine are not its children: they hang off Ray's daemons). Prints the command's wall time and
the peak summed PSS at the end, and writes both to --out as JSON when given. Linux only."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def summed_pss_kib(since_ticks: int, uid: int) -> int:
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid or _start_ticks(int(entry.name)) < since_ticks:
                continue
            for line in Path(entry.path, "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except (OSError, ValueError, IndexError):
            continue  # a process that ended while being read
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--out", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    since = _start_ticks(os.getpid())
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], summed_pss_kib(since, os.getuid()))
            done.wait(args.interval)

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    sampler.start()
    code = subprocess.call(command)
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    result = {"command": command, "exit_code": code, "wall_s": round(wall, 1),
              "peak_summed_pss_gib": round(peak[0] / 2**20, 2), "interval_s": args.interval}
    print(f"[tree_memory] exit {code}, wall {wall / 60:.1f} min, peak summed PSS {result['peak_summed_pss_gib']} GiB",
          flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
