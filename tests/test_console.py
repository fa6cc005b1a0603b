"""The quiet main job's pieces: the progress follower, the output redirect, step warnings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import dara
from dara.console import follow_progress, step_warnings
from dara.run_log import Progress, clock


def append(path, *records):
    with open(path, "a") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)


def test_progress_prints_each_new_step_once_with_time_left(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append(path, {"step": 1, "reward/format/mean": 0.1})  # a previous session's step: not reprinted
    progress = Progress(path, ["format"], total_steps=4)
    assert progress.poll() == []
    path.write_text("")  # a resume rewrites the log without the steps past its checkpoint
    assert progress.poll() == []
    with open(path, "a") as handle:  # step 2 half-written by the trainer: wait for the rest
        handle.write(json.dumps({"step": 1, "reward/format/mean": 0.25, "dara/density/format": 0.5,
                                 "timing_s/step": 60.0}) + '\n{"step": 2, "rew')
    (line,) = progress.poll()
    assert line.startswith("[dara] step 1/4 | reward format 0.250 | density format 0.500 | weight  | ")
    assert line.endswith(", ~3:00 left")  # 3 steps x the first step's 60 s
    with open(path, "a") as handle:
        handle.write('ard/format/mean": 0.5}\n')
    (line,) = progress.poll()
    assert re.search(r"step 2/4 \| reward format 0\.500 .*\| \d+:\d\d elapsed, ~\d+:\d\d left$", line)
    assert progress.poll() == []
    assert [clock(s) for s in (0, 59.6, 61, 3600, 3725)] == ["0:00", "1:00", "1:01", "1:00:00", "1:02:05"]


def test_follow_progress_prints_steps_and_their_warnings(tmp_path):
    path = tmp_path / "metrics.jsonl"
    printed = []
    with follow_progress(Progress(path, ["format"], None), printed.append, interval=0.05):
        append(path, {"step": 1, "reward/format/mean": 1.0})
        time.sleep(0.3)
        append(path, {"step": 2, "reward/format/mean": 1.0, "reward/timeouts": 3.0, "reward/errors": 0.0})
    assert [line.split(" |")[0] for line in printed] == ["[dara] step 1", "[dara] step 2",
                                                           "[dara] warning: step 2: 3 reward timeouts"]
    assert step_warnings({"step": 5, "reward/errors": 1.0}) == ["[dara] warning: step 5: 1 reward errors"]


CHILD = """
import os, subprocess, sys
from dara.console import quiet_output
with quiet_output(sys.argv[1]) as console:
    print("verl says a lot", flush=True)
    print("a warning", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-c", "print('a Ray worker says more')"])
    print("[dara] step 1/1", file=console, flush=True)
print("summary", flush=True)
"""


def test_quiet_output_sends_everything_but_the_console_stream_to_the_log(tmp_path):
    log = tmp_path / "logs" / "main.log"
    done = subprocess.run([sys.executable, "-c", CHILD, str(log)], capture_output=True, text=True, timeout=120,
                          cwd=dara.PROJECT_ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[dara] step 1/1\nsummary\n" and done.stderr == ""
    assert log.read_text().splitlines() == ["verl says a lot", "a warning", "a Ray worker says more"]
