"""Fixtures shared by the whole test session."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import threading
import warnings
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
    """The session's one offline smoke build's folder; under pytest-xdist, beside the workers' own temp folders
    (in the one they share), so the workers build it once between them."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "data_prep_smoke"


@pytest.fixture(scope="session")
def smoke_assets(smoke_assets_dir):
    """`data_prep.smoke.build`'s paths: the first xdist worker builds under a file lock, the others reuse it."""
    from data_prep import smoke

    smoke_assets_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(smoke_assets_dir.parent / "data_prep_smoke.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return smoke.build(smoke_assets_dir, seed=0)


@pytest.fixture(autouse=True)
def no_ray_left_in_the_test_process(request):
    """verl's actors auto-initialise Ray in a test that builds them in-process; left running, a later test's
    `ray.init` or `run_ppo` would attach to it (no logical GPU): it is shut down, the test named in a warning."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
        warnings.warn(f"{request.node.nodeid} left Ray initialised in the test process: shut down", stacklevel=1)


@pytest.fixture(scope="session")
def seed_smoke_assets(smoke_assets, smoke_assets_dir):
    """`seed(output_root)`: copies the smoke build to `<output_root>/assets/smoke`, where `dara.train` reuses it
    instead of building it again (~15 s); the README's smoke run builds its own."""
    def seed(output_root):
        target = os.path.join(output_root, "assets", "smoke")
        if not os.path.exists(target):
            shutil.copytree(smoke_assets_dir, target)
        return output_root

    return seed


@pytest.fixture(scope="session")
def python_module():
    """`python -m module args` as a user runs it, from the checkout (or `cwd`) with `env` added: the finished
    process (text output captured) or, with `wait=False`, the running `Popen` with its pipes."""

    def run(module: str, *args, env=None, wait: bool = True, timeout: float = 900, cwd=None):
        command = [sys.executable, "-m", module, *map(str, args)]
        options = {"text": True, "env": {**os.environ, **(env or {})}, "cwd": cwd or dara.PROJECT_ROOT}
        if not wait:
            return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)
        return subprocess.run(command, capture_output=True, timeout=timeout, **options)

    return run


@pytest.fixture(scope="module", autouse=True)
def estimator_registry_as_it_was():
    """A module that registers estimators of its own leaves the library's registry as it found it."""
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
    """The smoke run's tokenizer recipe (byte-level BPE, ChatML specials), trained once offline."""
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


@pytest.fixture
def health_server():
    """A local HTTP server (a rollout server's /health, a wandb host): /health answers the statuses in `script`
    first, then `status`, to GET and HEAD; other paths 404. `address` is host:port; `requests` counts the asks."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            server.requests += 1
            status = (server.script.pop(0) if server.script else server.status) if self.path == "/health" else 404
            self.send_response(status)
            self.end_headers()

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.status, server.script, server.requests = 200, [], 0
    server.address = f"127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()
