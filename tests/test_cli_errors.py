"""Every command line fails cleanly on bad input: a message naming the problem, a non-zero exit, no traceback. Each
runs as `python -m MODULE ARGS` would, in this process (runpy); a `SystemExit` message is what Python would print."""

from __future__ import annotations

import runpy
import sys
import warnings

import pytest

from dara import PROJECT_ROOT as ROOT


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_inputs")
    for name, text in {"columns.csv": "a,b\n1,2\n", "not_json.jsonl": "this is not json\n{\"step\": 1}\n",
                       "not.parquet": "plain text, not parquet\n", "curves.csv": "method,seed,step,x\ngrpo,0,1,0.5\n",
                       "protocol.json": (ROOT / "results" / "cpu_headline" / "protocol.json").read_text()}.items():
        (root / name).write_text(text)
    (root / "model").mkdir()
    return root


THRESHOLD = ["--metric", "m", "--threshold", "0.5"]
EVAL = ["--out", "{root}/eval", "--model", "{root}/model"]
CASES = [  # (argv after `python -m`, text the error names; argparse's own errors are argparse's)
    (["results", "thresholds", "missing.csv", *THRESHOLD], "missing.csv"),
    (["results", "thresholds", "{root}/columns.csv", *THRESHOLD], "'method' column"),
    (["results", "thresholds", "{root}/not_json.jsonl", *THRESHOLD], "not_json.jsonl"),
    (["results", "thresholds", "{root}/curves.csv", "--metric", "no_such_metric", "--threshold", "0.5"],
     "no_such_metric"),
    (["results", "table", "missing.csv", "--metrics", "m"], "missing.csv"),
    (["results", "collect", "{root}/nowhere"], "nowhere"),
    (["results", "report", "{root}/curves.csv", "--out", "{root}/page", "--reference", "{root}/no_ref"],
     "--reference {root}/no_ref: no such folder"),
    (["results", "report", "{root}/model", "--out", "{root}/page"], "nothing to report"),
    (["results", "headline", "{root}", "--protocol", "{root}/missing.json", "--out", "{root}/o"],
     "missing.json is missing"),
    (["results", "headline", "{root}/nowhere", "--protocol", "{root}/protocol.json", "--out", "{root}/o"],
     "nowhere: no such folder"),
    (["results.evaluation", "toolrl", "all", *EVAL, "--data", "{root}/missing.parquet"], "missing.parquet does not exist"),
    (["results.evaluation", "toolrl", "all", *EVAL, "--data", "{root}/not.parquet"], "not.parquet"),
    (["results.evaluation", "math", "all", *EVAL], "needs --data"),
    (["recipes", "nope", "--dry-run"], "unknown recipe 'nope'"),
    (["recipes", "smoke", "--dry-run", "--cluster", "tpu_v9"], "cluster=tpu_v9 does not exist"),
    (["data_prep", "toolrl", "--out", "{root}/dp", "--source", "{root}/missing.json"], "missing.json"),
    (["dara.train", "run.output_root={root}/run", "run.model_facts.head_dim=16"],  # the rollout check, before Ray
     "[dara] invalid configuration: model tiny's head_dim 16 "),
    (["dara.train", "run.output_root={root}/run", "algorithm.reward_channels=[format,lenght]"], "[dara] invalid "
     "configuration: reward channel 'lenght' (algorithm.reward_channels) is not one the reward returns: the reward's "
     "channels are ['format', 'correctness']"),
    (["dara.train", "run.output_root={root}/run", "estimator=nope"],  # Hydra's errors: test_train_entry.py
     "[dara] invalid override: In 'train': Could not find 'estimator/nope'"),
    (["dara.testbed", "--quick", "--studies", "nope", "--out", "{root}/tb"], "nope"),
]


@pytest.mark.parametrize("argv, named", CASES, ids=[" ".join(c[0][:2]) + f"-{i}" for i, c in enumerate(CASES)])
def test_bad_input_fails_with_a_named_error_and_no_traceback(bad_files, argv, named, capfd, monkeypatch):
    argv = [part.format(root=bad_files) for part in argv]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as stop, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported by an earlier test
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    code, out = stop.value.code, capfd.readouterr()
    text = out.out + out.err + (code if isinstance(code, str) else "")  # the interpreter prints a str exit
    assert code not in (0, None) and named.format(root=bad_files) in text and "Traceback" not in text, text[-3000:]
    assert not isinstance(code, str) or "\n" not in code, code  # a message of the project's own: one line
    assert not list(bad_files.rglob("ray")) and not list(bad_files.rglob("run_info.json"))  # nothing started
