"""Every command line fails cleanly on bad input: a message naming the problem, a non-zero exit, no traceback.

Each command runs as `python -m MODULE ARGS` would, in this process (runpy, with sys.argv set): an exception
that is not a clean exit fails the test as it would print a traceback; a `SystemExit` message is what the
interpreter would print. (`python -m dara.train`'s bad channels and overrides run as real processes in
test_train_entry.py; the documented commands in test_docs_commands.py.)
"""

from __future__ import annotations

import runpy
import sys
import warnings

import pytest

from dara import PROJECT_ROOT as ROOT


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_inputs")
    (root / "columns.csv").write_text("a,b\n1,2\n")
    (root / "not_json.jsonl").write_text("this is not json\n{\"step\": 1}\n")
    (root / "not.parquet").write_text("plain text, not parquet\n")
    (root / "model").mkdir()
    (root / "curves.csv").write_text("method,seed,step,x\ngrpo,0,1,0.5\n")
    (root / "protocol.json").write_text((ROOT / "results" / "cpu_headline" / "protocol.json").read_text())
    return root


CASES = [
    # (argv after `python -m`, text the error names)
    (["results", "thresholds", "missing.csv", "--metric", "m", "--threshold", "0.5"], "missing.csv"),
    (["results", "thresholds", "{root}/columns.csv", "--metric", "m", "--threshold", "0.5"], "'method' column"),
    (["results", "thresholds", "{root}/not_json.jsonl", "--metric", "m", "--threshold", "0.5"], "not_json.jsonl"),
    (["results", "table", "missing.csv", "--metrics", "m"], "missing.csv"),
    (["results", "collect", "{root}/nowhere"], "nowhere"),
    (["results", "thresholds", "{root}/curves.csv", "--metric", "no_such_metric", "--threshold", "0.5"],
     "no_such_metric"),
    (["results", "report", "{root}/curves.csv", "--out", "{root}/page", "--reference", "{root}/no_ref"],
     "--reference {root}/no_ref: no such folder"),
    (["results", "report", "{root}/model", "--out", "{root}/page"], "nothing to report"),
    (["results", "headline", "{root}", "--protocol", "{root}/missing.json", "--out", "{root}/o"],
     "missing.json is missing"),
    (["results", "headline", "{root}/nowhere", "--protocol", "{root}/protocol.json", "--out", "{root}/o"],
     "nowhere: no such folder"),
    (["results", "nope"], "invalid choice: 'nope'"),
    (["results.evaluation", "toolrl", "all", "--out", "{root}/eval", "--model", "{root}/model", "--data",
      "{root}/missing.parquet"], "missing.parquet does not exist"),
    (["results.evaluation", "toolrl", "all", "--out", "{root}/eval", "--model", "{root}/model", "--data",
      "{root}/not.parquet"], "not.parquet"),
    (["results.evaluation", "math", "all", "--out", "{root}/eval", "--model", "{root}/model"], "needs --data"),
    (["recipes", "nope", "--dry-run"], "unknown recipe 'nope'"),
    (["recipes", "toolrl_main", "--seeds", "x"], "invalid int value: 'x'"),
    (["recipes", "smoke", "--dry-run", "--cluster", "tpu_v9"], "cluster=tpu_v9 does not exist"),
    (["data_prep", "nope"], "invalid choice: 'nope'"),
    (["data_prep", "toolrl", "--out", "{root}/dp", "--source", "{root}/missing.json"], "missing.json"),
    (["data_prep", "smoke"], "--out"),
    (["dara.testbed", "--quick", "--studies", "nope", "--out", "{root}/tb"], "nope"),
]


@pytest.mark.parametrize("argv, named", CASES, ids=[" ".join(c[0][:2]) + f"-{i}" for i, c in enumerate(CASES)])
def test_bad_input_fails_with_a_named_error_and_no_traceback(bad_files, argv, named, capfd, monkeypatch):
    argv = [part.format(root=bad_files) for part in argv]
    monkeypatch.setattr(sys, "argv", [argv[0], *argv[1:]])
    with pytest.raises(SystemExit) as stop, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported by an earlier test
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    code = stop.value.code
    out = capfd.readouterr()
    text = out.out + out.err + (code if isinstance(code, str) else "")  # the interpreter prints a str exit
    assert code not in (0, None), text[-2000:]
    assert named.format(root=bad_files) in text, text[-2000:]
    assert "Traceback" not in text, text[-3000:]
