"""The rollout-engine watchdog (dara.verl.engine_watchdog) against a real HTTP server's /health (`health_server`,
tests/conftest.py); a training run whose engine is killed: tests/test_training.py."""

from __future__ import annotations

import socket
import time

import pytest

from dara.verl import engine_watchdog as wd


def unused_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_health_tells_a_live_a_dead_and_a_missing_server_apart_whatever_proxy_is_set(health_server, monkeypatch,
                                                                                      tmp_path):
    # a cluster's proxy settings: http_proxy at a dead port, the subnet in CIDR form in no_proxy (ignored by Python)
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, f"http://{unused_address()}")
    monkeypatch.setenv("no_proxy", "10.0.0.0/8,192.0.2.0/24")
    watchdog = wd.EngineWatchdog("vllm", [health_server.address], str(tmp_path))
    assert wd.health(health_server.address, timeout_s=5) is None and health_server.requests == 1
    watchdog.raise_if_dead()  # healthy: nothing
    assert "unreachable" in wd.health(unused_address(), timeout_s=5)
    health_server.status = 503
    with pytest.raises(wd.RolloutEngineDied) as caught:
        watchdog.raise_if_dead(cause=ValueError("no trajectories"))
    assert f"rollout engine (vllm, server {health_server.address}) died: /health answered 503" in str(caught.value)
    assert "start the same command again to resume" in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)


def wait_for(condition, checks: int = 6000) -> None:
    for _ in range(checks):
        if condition():
            return
        time.sleep(0.01)
    pytest.fail(f"not reached after {checks} checks")


def started(health_server, run_dir):
    """A watchdog thread polling every 0.5 s (also each poll's timeout: 0.25 s read a healthy server as unreachable
    while make test's two lanes and other jobs loaded the machine), ending after 3 failed polls; `ended`: the exit codes it would end the process with."""
    ended = []
    watchdog = wd.EngineWatchdog("vllm", [health_server.address], run_dir, interval_s=0.5, failures=3,
                                 end_process=ended.append).start()
    return watchdog, ended


def test_the_thread_ends_the_process_after_consecutive_failed_polls_only(health_server, tmp_path):
    """Fewer failed polls in a row are forgiven; a stopped watchdog (servers shut down after training) ends nothing."""
    health_server.script = [503, 503, 200, 503, 503]  # twice two failures in a row, then healthy
    watchdog, ended = started(health_server, tmp_path)
    wait_for(lambda: watchdog.polls >= 10)
    stopped, stopped_ended = started(health_server, None)
    wait_for(lambda: stopped.polls >= 2)
    stopped.stop()
    polls = stopped.polls
    assert ended == [] and wd.read_engine_failure(tmp_path) is None
    health_server.status = 503
    wait_for(lambda: ended)
    line = wd.read_engine_failure(tmp_path)
    assert ended == [wd.EXIT_CODE] and (tmp_path / wd.ENGINE_FAILURE).read_text().count("\n") == 1
    assert line.startswith("the rollout engine (vllm, server ") and "/health answered 503" in line
    assert stopped.polls == polls and stopped_ended == []
    wd.clear_engine_failure(tmp_path)
    assert wd.read_engine_failure(tmp_path) is None


@pytest.mark.parametrize("interval_s, failures", [(0, 3), (1.0, 0)])
def test_bad_settings_are_refused(interval_s, failures):
    with pytest.raises(ValueError, match="engine watchdog"):
        wd.EngineWatchdog("vllm", ["127.0.0.1:1"], None, interval_s=interval_s, failures=failures)
