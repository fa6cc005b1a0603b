"""dara.io: torn-line-tolerant JSONL reading, atomic writes, run finished."""

from __future__ import annotations

import json
import os

import pytest

from dara import io as dio


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
