"""Every fenced ```bash command in README.md and docs/*.md is checked: run for real, or at least parsed.

Markers (an HTML comment on the line right before the fence, invisible when rendered):

    <!-- runnable -->          every command of the block runs for real here, in order (a few seconds each), and
                               must exit 0; a `python -m dara.train` run must log dara/density/<c> at every step
                               for each of its reward channels, and verl's own `python -m verl.trainer.main_ppo`
                               must print dara/density/<c> and dara/weight/<c> in its console line of every step
    <!-- runnable: slow -->    the same, in the slow lane (pytest -m slow): ~5 s or more (a dara.train process)
    (no marker)                parse-only: the command names a real module / script / make target / file, and

- `python -m dara.train|dara.preflight OVERRIDES`: the overrides compose (Hydra, in this process, as
  `--cfg job --resolve` does) and pass `check_config`, which is what fails before Ray starts;
- any other `python -m MODULE [SUBCOMMAND...] --flags` or `python SCRIPT --flags`: every `--flag` is in the
  `--help` text of that (sub)command;
- `make TARGET`: the Makefile has the target; `sbatch ... SCRIPT OVERRIDES`: the script exists and the overrides
  compose; `pytest FILES`: the files exist.
A command whose comment says `exits N` must exit with status N (a documented failure, e.g. a preflight problem).
Training, evaluation with a model, sbatch and installs are parse-only: running them costs minutes to hours, a GPU or
a Slurm cluster. Real runs happen in a copy of the checkout made of symlinks (outputs land in pytest's tmp_path); the
repository's own sample and reference data come with it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import re
import runpy
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!--\s*runnable(?::\s*(\w+))?\s*-->\s*$")
HYDRA_ENTRIES = {"dara.train", "dara.preflight"}
VERL_ENTRY = "verl.trainer.main_ppo"
SHELL_ONLY = {"mkdir", "for", "find", "cp", "cd", "export", "wandb"}  # plain shell, nothing of the project's
NOT_IN_SANDBOX = {"outputs", "figures", "eval", "data", ".git", "report", "report_paper", "report_testbed"}


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str  # the command without its comment, continuation lines joined
    comment: str
    mode: str  # "run", "slow" or "parse"
    block: int = 0  # the line of the block's fence: a block's commands run in order, as one test

    @property
    def expected_status(self) -> int:
        found = re.search(r"\bexits? (\d+)\b", self.comment)
        return int(found.group(1)) if found else 0

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def extract(path: Path) -> list[Command]:
    """The commands of every ```bash block in one markdown file, with the block's marker."""
    lines = path.read_text().splitlines()
    commands, index, doc = [], 0, str(path.relative_to(ROOT))
    while index < len(lines):
        if lines[index].strip() != "```bash":
            index += 1
            continue
        marker = MARKER.match(lines[index - 1].strip()) if index else None
        mode = "parse" if marker is None else ("slow" if marker.group(1) == "slow" else "run")
        fence = index + 1
        index += 1
        pending, start = "", None
        while index < len(lines) and lines[index].strip() != "```":
            line = lines[index]
            index += 1
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            start = start or index
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            text, comment = split_comment(pending + line)
            commands.append(Command(doc, start, text, comment, mode, fence))
            pending, start = "", None
        index += 1
    return commands


def split_comment(line: str) -> tuple[str, str]:
    """(command, comment): the comment starts at the first '#' outside quotes that follows a space."""
    quote = None
    for position, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1].isspace()):
            return line[:position].strip(), line[position + 1:].strip()
    return line.strip(), ""


ALL = [command for path in DOCS for command in extract(path)]


def argv_of(command: Command) -> list[str]:
    """The command's argv with its python interpreter replaced by this one and VAR=value prefixes dropped."""
    argv = shlex.split(command.text)
    while argv and re.match(r"^[A-Z_]+=", argv[0]):
        argv = argv[1:]
    if argv and argv[0] in ("python", "python3", ".venv/bin/python"):
        argv = [sys.executable, *argv[1:]]
    return argv


def test_every_doc_has_commands_and_markers_are_well_formed():
    assert len(ALL) >= 40, f"only {len(ALL)} commands extracted"
    assert {c.mode for c in ALL} >= {"run", "parse"}
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "runnable" in line and line.strip().startswith("<!--"):
                assert MARKER.match(line.strip()), f"{path.name}:{number}: malformed marker {line!r}"


# ----------------------------------------------------------------------------- real runs
@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    """A checkout of symlinks (outputs stay in tmp)."""
    base = tmp_path_factory.mktemp("docs")
    checkout = base / "checkout"
    checkout.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in NOT_IN_SANDBOX:
            (checkout / entry.name).symlink_to(entry)
    return checkout


def run_for_real(command: Command, sandbox: Path) -> None:
    argv = argv_of(command)
    started = time.time()
    result = subprocess.run(argv, cwd=sandbox, capture_output=True, text=True, timeout=600)
    assert result.returncode == command.expected_status, (
        f"{command}: `{command.text}` exited {result.returncode} (expected {command.expected_status})\n"
        f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    if argv[1:3] == ["-m", "dara.train"] and "--cfg" not in argv and command.expected_status == 0:
        check_training_logs(command, sandbox, started)
    if argv[1:3] == ["-m", VERL_ENTRY] and command.expected_status == 0:
        check_console_metrics(command, result.stdout + result.stderr)


def check_console_metrics(command: Command, output: str) -> None:
    """verl's own entry point (the project's plugin): verl's console logger printed, at every step of the run,
    dara/density/<c> and dara/weight/<c> for the same reward channels."""
    steps = int(re.search(r"trainer\.total_training_steps=(\d+)", command.text).group(1))
    lines = {int(m.group(1)): m.group(0) for m in re.finditer(r"\bstep:(\d+) - .*", output)}
    assert sorted(lines) == list(range(1, steps + 1)), f"{command}: verl logged steps {sorted(lines)}"
    for step, line in lines.items():
        density = set(re.findall(r"dara/density/(\w+):", line))
        assert len(density) >= 2 and density == set(re.findall(r"dara/weight/(\w+):", line)), (
            f"{command}: step {step} console line lacks the library's metrics: {line[:400]}")


def check_training_logs(command: Command, sandbox: Path, started: float) -> None:
    """The run folders the command wrote hold, at every step, dara/density/<c> for each reward channel."""
    from dara.run_log import read_metrics

    written = [path.parent for path in sandbox.glob("outputs/*/metrics.jsonl") if path.stat().st_mtime >= started]
    assert written, f"{command}: no run folder under outputs/ logged a step"
    for folder in written:
        channels = json.loads((folder / "run_info.json").read_text())["reward_channels"]
        for record in read_metrics(folder / "metrics.jsonl"):
            missing = [c for c in channels if f"dara/density/{c}" not in record]
            assert not missing, f"{command}: {folder.name} step {record['step']} lacks dara/density/ of {missing}"


def blocks(mode: str) -> list[list[Command]]:
    """The commands of each block of `mode`, in order (a block's commands may build on each other)."""
    grouped: dict[tuple[str, int], list[Command]] = {}
    for command in ALL:
        if command.mode == mode:
            grouped.setdefault((command.doc, command.block), []).append(command)
    return list(grouped.values())


@pytest.mark.parametrize("block", blocks("run"), ids=lambda block: str(block[0]))
def test_runnable_command_runs(block, sandbox):
    for command in block:
        run_for_real(command, sandbox)


@pytest.mark.slow
@pytest.mark.starts  # training blocks among them
@pytest.mark.parametrize("block", blocks("slow"), ids=lambda block: str(block[0]))
def test_slow_runnable_command_runs(block, sandbox, seed_smoke_assets):
    seed_smoke_assets(sandbox / "outputs")  # training commands reuse the session's tiny model (its build: make smoke)
    for command in block:
        run_for_real(command, sandbox)


# ----------------------------------------------------------------------------- parse-only checks
@functools.cache
def help_text(argv_prefix: tuple[str, ...]) -> str:
    """The `--help` text of a (sub)command. A `python -m MODULE` command runs in this process, as `python -m` runs
    it (runpy, `__name__ == "__main__"`, sys.argv), which saves a Python start per command; a script (which may
    put its own folder on sys.path) runs in its own process. That each module starts in a fresh interpreter is
    checked by the runnable blocks and tests/test_cli_errors.py."""
    if argv_prefix[:2] != (sys.executable, "-m"):
        result = subprocess.run([*argv_prefix, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (
            f"`{' '.join(argv_prefix)} --help` exited {result.returncode}: {result.stderr[-2000:]}")
        return result.stdout
    module, words = argv_prefix[2], list(argv_prefix[3:])
    printed, saved_argv = io.StringIO(), sys.argv
    sys.argv = [module, *words, "--help"]
    try:
        with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exited:
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    finally:
        sys.argv = saved_argv
    assert exited.value.code in (0, None), f"`python -m {module} {' '.join(words)} --help` exited {exited.value.code}"
    return printed.getvalue()


def check_flags(argv: list[str], prefix_length: int) -> None:
    """Every --flag of argv is in the --help text of the (sub)command its leading positionals name."""
    positionals = []
    for token in argv[prefix_length:]:
        if token.startswith("-"):
            break
        positionals.append(token)
    # subcommands are the leading bare words (data paths and Hydra overrides contain '/', '.' or '=')
    words = []
    for token in positionals:
        if not re.fullmatch(r"[a-z_]+", token) or token.startswith(("outputs", "eval", "figures")):
            break
        words.append(token)
    text = help_text(tuple(argv[:prefix_length] + words))
    for token in argv[prefix_length:]:
        if token.startswith("--"):
            flag = token.split("=", 1)[0]
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"{flag} is not an option here"


def overrides_of(tokens: list[str]) -> list[str]:
    return [t for t in tokens if "=" in t and not t.startswith("-")]


@functools.cache
def compose_checked(overrides: tuple[str, ...]) -> None:
    from dara.config_checks import check_config
    from recipes.slurm import compose_run

    check_config(compose_run(list(overrides)))


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))


def parse_check(command: Command) -> None:
    argv = argv_of(command)
    head = argv[0]
    if head == sys.executable and argv[1] == "-m":
        module = argv[2]
        assert importlib.util.find_spec(module) is not None, f"no module {module}"
        if module == VERL_ENTRY:  # verl's own Hydra app on the package's conf/train.yaml (the plugin)
            assert argv[3:7] == ["--config-path", "pkg://dara.conf", "--config-name", "train"], argv
            compose_checked(tuple(overrides_of(argv[7:])))
        elif module in HYDRA_ENTRIES:
            compose_checked(tuple(overrides_of(argv[3:])))
            flags = [t for t in argv[3:] if t.startswith("--") and t not in ("--cfg", "--resolve")]
            if module == "dara.preflight":
                check_flags([*argv[:3], *flags], 3)
        else:
            check_flags(argv, 3)
    elif head == sys.executable:
        assert (ROOT / argv[1]).is_file(), argv[1]
        check_flags(argv, 2)
    elif head == "make":
        targets = [t for t in argv[1:] if "=" not in t]
        assert set(targets) <= make_targets(), f"no make target {set(targets) - make_targets()}"
    elif head == "sbatch":
        script = next(t for t in argv[1:] if t.endswith(".sbatch"))
        assert (ROOT / script).is_file(), script
        compose_checked(tuple(overrides_of(argv[argv.index(script) + 1:])))
    elif head.endswith("pytest"):
        for path in [t for t in argv[1:] if not t.startswith("-")]:
            assert (ROOT / path.split("::")[0]).exists(), path
    elif head.endswith("pip"):
        assert argv[1] == "install"
    else:
        assert head in SHELL_ONLY, f"{command}: no parse check for `{head}`; add one or mark the block runnable"


@pytest.mark.parametrize("command", [c for c in ALL if c.mode == "parse"], ids=str)
def test_command_parses(command):
    for part in command.text.split(" && "):  # `mkdir -p outputs && sbatch ...`: each part on its own
        parse_check(replace(command, text=part))
