"""scripts/bench/tree_memory.py: the peak memory docs/measured.md reports is that of the measured command's process
tree (what it daemonises included), not of other work started on the machine meanwhile."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TREE_MEMORY = PROJECT_ROOT / "scripts" / "bench" / "tree_memory.py"
HOLD = "import sys, time; x = bytearray({mib} << 20); time.sleep(float(sys.argv[1]))"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_counts_the_commands_tree_with_its_orphans_and_not_other_work(tmp_path):
    out = tmp_path / "memory.json"
    # the command's tree: a shell whose subshell leaves an orphan holding 150 MiB (adopted by tree_memory), and
    # sleeps while it lives; other work holding 400 MiB starts meanwhile
    orphan = f"({sys.executable} -c '{HOLD.format(mib=150)}' 4 &)"
    measured = subprocess.Popen([sys.executable, str(TREE_MEMORY), "--interval", "0.2", "--out", str(out), "--",
                                 "sh", "-c", f"{orphan}; sleep 5"])
    time.sleep(0.5)
    other = subprocess.Popen([sys.executable, "-c", HOLD.format(mib=400), "5"])
    try:
        assert measured.wait(timeout=60) == 0
    finally:
        other.kill()
        other.wait()
    result = json.loads(out.read_text())
    assert result["exit_code"] == 0 and result["finished"]
    # 150 MiB and the interpreters' own few tens; the other work's 400 MiB would put it above 0.5 GiB
    assert 0.14 <= result["peak_summed_pss_gib"] < 0.35, result


def test_measures_a_running_process_tree_until_it_ends(tmp_path):
    out = tmp_path / "memory.json"
    running = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{HOLD.format(mib=150)}' 3"])
    measured = subprocess.run([sys.executable, str(TREE_MEMORY), "--interval", "0.2", "--out", str(out),
                               "--pid", str(running.pid)], capture_output=True, text=True, timeout=60)
    running.wait()
    result = json.loads(out.read_text())
    assert measured.returncode == 0 and result["finished"] and result["command"] == f"pid {running.pid}"
    assert 0.14 <= result["peak_summed_pss_gib"] < 0.35, result
    assert "peak summed PSS" in measured.stdout


def test_refuses_both_or_neither_of_a_command_and_a_pid():
    both = subprocess.run([sys.executable, str(TREE_MEMORY), "--pid", "1", "--", "true"], capture_output=True, text=True)
    neither = subprocess.run([sys.executable, str(TREE_MEMORY)], capture_output=True, text=True)
    assert both.returncode == neither.returncode == 2
    assert "give either a command after -- or --pid" in both.stderr + neither.stderr
