"""The quiet main job's pieces (the progress follower, the output redirect, step warnings), the run log across a
resume, and the dara.io beneath them: torn-line-tolerant JSONL, atomic writes, run finished."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

import dara
from dara import io as dio
from dara.console import follow_progress, step_warnings
from dara.run_log import Progress, RunLog, clock, read_metrics


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


def test_run_log_drops_steps_after_resume(tmp_path):
    log = RunLog(tmp_path / "metrics.jsonl", total_steps=4)
    for step in (1, 2, 3):
        log.write(step, {"reward/format/mean": 0.5, "dara/density/format": 0.25, "note": "text"}, ["format"])
    resumed = RunLog(tmp_path / "metrics.jsonl", total_steps=4, resumed_step=2)  # checkpoint at step 2
    resumed.write(3, {"reward/format/mean": 0.75}, ["format"])
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[-1]["reward/format/mean"] == 0.75 and "note" not in records[0]  # a torn line: below


@pytest.mark.parametrize(("text", "kwargs", "expected"), [
    ('{"step": 1}\n{"step": 2}\n{"step": 3, "rew', {}, ([{"step": 1}, {"step": 2}], True)),  # torn last line
    ('{"step": 1}\n\n{"step": 2}\n\n', {}, ([{"step": 1}, {"step": 2}], False)),  # blank lines are not records
    ('{"step": 1}\n{"step": 2, \n{"step": 3}\n', {}, r":2: not valid JSON"),
    ('{"step": 1}\n[1, 2]\n', {}, r":2: expected a JSON object, got list"),
    ('{"step": 1}\n{"step": 2', {"tolerate_torn_last_line": False}, ":2"),
])
def test_read_jsonl_drops_only_a_torn_last_line_and_names_a_bad_line(tmp_path, text, kwargs, expected):
    (tmp_path / "log.jsonl").write_text(text)
    if isinstance(expected, str):
        with pytest.raises(dio.JsonlError, match=r"log\.jsonl" + expected):
            dio.read_jsonl(tmp_path / "log.jsonl", **kwargs)
    else:
        assert dio.read_jsonl(tmp_path / "log.jsonl") == expected


def test_atomic_write_leaves_the_old_file_and_no_temporary_when_the_writer_raises(tmp_path):
    target = tmp_path / "out" / "table.csv"
    dio.atomic_write_text(target, "old\n")
    with pytest.raises(RuntimeError, match="writer failed"), dio.atomic_path(target) as tmp:
        tmp.write_text("half a ")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old\n"
    assert os.listdir(target.parent) == ["table.csv"]
    with pytest.raises(TypeError):  # a payload json cannot encode fails before the target is touched
        dio.atomic_write_json(target, {"x": object()})
    assert target.read_text() == "old\n" and os.listdir(target.parent) == ["table.csv"]
    fresh = tmp_path / "new.json"
    with pytest.raises(RuntimeError), dio.atomic_path(fresh):
        raise RuntimeError("no file at all")
    assert not fresh.exists() and sorted(os.listdir(tmp_path)) == ["out"]


def test_atomic_writes_round_trip_with_ordinary_permissions_and_run_finished_reads_the_last_step(tmp_path):
    dio.atomic_write_json(tmp_path / "a.json", {"b": 1, "a": [2]}, sort_keys=True)
    assert json.loads((tmp_path / "a.json").read_text()) == {"a": [2], "b": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert not dio.run_finished(tmp_path, 3)  # no log yet
    dio.atomic_write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1}, {"step": 2, "name": "ü"}])
    assert dio.read_jsonl(tmp_path / "metrics.jsonl") == ([{"step": 1}, {"step": 2, "name": "ü"}], False)
    assert not dio.run_finished(tmp_path, 3) and not dio.run_finished(tmp_path, None)
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 3}\n{"step": 4, "x"')  # a torn line after the last step does not matter
    assert dio.run_finished(tmp_path, 3)
