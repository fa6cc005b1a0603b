"""Fixtures shared by the whole test session."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import dara

# Every Ray cluster the tests start is local and single-user, as in the CPU runtime (dara.verl.cpu.ray_local).
# Left unset, the first `ray.init` in this process (verl's actors auto-initialise Ray when a test builds them
# in-process) sets RAY_AUTH_MODE=token in os.environ for good, and every later subprocess inherits it.
os.environ["RAY_AUTH_MODE"] = "disabled"
# Under pytest-xdist the workers already fill the cores: each runs torch (and the commands it starts) on one
# thread. Left at torch's default (a thread per core in every worker), the workers' OpenMP threads contend for the
# cores, and more so when other jobs share the machine.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def smoke_assets_dir(tmp_path_factory):
    """The folder of the session's one offline smoke build (tiny model, tokenizer, tool-calling parquet).

    Under pytest-xdist every worker has its own base temp folder inside the session's: the build lies beside
    them, in the folder they share, so the workers build it once between them (`smoke_assets`).
    """
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "data_prep_smoke"


@pytest.fixture(scope="session")
def smoke_assets(smoke_assets_dir):
    """`data_prep.smoke.build`'s paths, built once per session (a complete build is reused, not rebuilt).

    The first xdist worker to get here builds under a file lock; the others wait for it and reuse the build.
    """
    import fcntl

    from data_prep import smoke

    smoke_assets_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(smoke_assets_dir.parent / "data_prep_smoke.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return smoke.build(smoke_assets_dir, seed=0)


@pytest.fixture(autouse=True)
def no_ray_left_in_the_test_process(request):
    """A test that builds verl objects in-process can start Ray there (verl's actors auto-initialise it).

    Left running, that Ray instance is what a later test's `ray.init` or verl's `run_ppo` would attach to
    (no logical GPU, its object store holding memory): every test ends with none, and the one that left it
    is named in a warning.
    """
    yield
    import sys
    import warnings

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
        warnings.warn(f"{request.node.nodeid} left Ray initialised in the test process: shut down", stacklevel=1)


@pytest.fixture(scope="session")
def seed_smoke_assets(smoke_assets, smoke_assets_dir):
    """`seed(output_root)`: copies the session's smoke build to `<output_root>/assets/smoke`, where `dara.train`
    looks for it (the tiny model's and the smoke task's assets), so the run reuses it instead of building it again
    (~15 s). For runs that test something else than the build; the README's smoke run builds its own."""
    import shutil

    def seed(output_root):
        target = os.path.join(output_root, "assets", "smoke")
        if not os.path.exists(target):
            shutil.copytree(smoke_assets_dir, target)
        return output_root

    return seed


@pytest.fixture(scope="session")
def python_module():
    """`python_module(module, *args, env=None, wait=True, timeout=900, cwd=None)`: the suite's one way to run a
    project command as a user does, `python -m module args` in a subprocess of this interpreter, from the checkout
    (or `cwd`), with `env` added to this process's environment. Returns the finished process (text output
    captured) or, with `wait=False`, the running `Popen` with its pipes."""

    def run(module: str, *args, env=None, wait: bool = True, timeout: float = 900, cwd=None):
        command = [sys.executable, "-m", module, *map(str, args)]
        options = {"text": True, "env": {**os.environ, **(env or {})}, "cwd": cwd or dara.PROJECT_ROOT}
        if not wait:
            return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)
        return subprocess.run(command, capture_output=True, timeout=timeout, **options)

    return run


@pytest.fixture(scope="module", autouse=True)
def estimator_registry_as_it_was():
    """A test module that registers estimators of its own (`register`, `load_estimator_module`) leaves the
    library's registry as it found it: the next module sees only what it registers itself."""
    from dara.estimators import registry

    estimators, loaded = dict(registry.ESTIMATORS), dict(registry._LOADED)
    yield
    for path, module in list(registry._LOADED.items()):  # imported here: imported again by the next load
        if path not in loaded:
            sys.modules.pop(module.module, None)
    registry.ESTIMATORS.clear()
    registry.ESTIMATORS.update(estimators)
    registry._LOADED.clear()
    registry._LOADED.update(loaded)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """The smoke run's tokenizer recipe (byte-level BPE, ChatML specials), trained once offline; the reward
    manager's tests (test_rewards_verl.py, test_user_reward.py) build their verl batches with it."""
    from data_prep import smoke

    tokenizer = smoke.train_tokenizer(smoke.chat_texts(smoke.synthetic_records(0, 40)))
    folder = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    """`tokenizer_dir`'s tokenizer, loaded with transformers."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


class HealthServer:
    """A local HTTP server: /health answers the statuses in `script` first, then `status` (200 while the engine
    runs), to GET and HEAD; other paths 404. `address` is host:port; `requests` counts what it was asked."""

    def __init__(self):
        owner = self
        self.status, self.script, self.requests = 200, [], 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                owner.requests += 1
                status = (owner.script.pop(0) if owner.script else owner.status) if self.path == "/health" else 404
                self.send_response(status)
                self.end_headers()

            do_HEAD = do_GET  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def health_server():
    """A rollout server's /health stand-in (test_engine_watchdog.py), and a host that answers 404 (test_tracking.py)."""
    server = HealthServer()
    yield server
    server.close()
