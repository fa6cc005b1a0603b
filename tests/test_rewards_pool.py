"""The hard-timeout process pool: results equal serial scoring, items over the limit are killed from any
thread (even while holding the interpreter lock), failures are reported, never raised or hung on."""

import json
import os
import random
import threading
import time

import pytest

from dara import SAMPLE_DATA
from rewards.pool import ERROR, OK, TIMEOUT, HardTimeoutPool
from rewards.verl_entry import POOL_PRELOAD, RewardOptions, score_sample

LIMIT_S = 3.0  # generous for real items on a loaded 2-core machine (they take milliseconds)


@pytest.fixture(scope="module")
def pool():
    with HardTimeoutPool(num_processes=2, timeout_s=LIMIT_S, preload=POOL_PRELOAD) as shared:
        yield shared


def test_pool_results_equal_serial_scoring(pool):
    rows = random.Random(0).sample(json.loads((SAMPLE_DATA / "math_benchmarks" / "math.json").read_text()), 16)
    items = [("math500", f"<think> ... </think> \\boxed{{{rows[(i + i % 2) % 16]['answer']}}}", row["answer"],
              100 * i, RewardOptions()) for i, row in enumerate(rows)]
    serial = [score_sample(*item) for item in items]
    assert [(o.status, o.value) for o in pool.map(score_sample, items)] == [(OK, s) for s in serial]
    assert {s["correctness"] for s in serial} == {0.0, 1.0}


def test_a_gil_holding_item_is_killed_from_a_thread_and_the_items_behind_it_run_on(pool):
    result = {}  # pow(9, 9**9) has 370 million digits: a C-level loop that holds the GIL for minutes
    thread = threading.Thread(target=lambda: result.update(out=pool.map(pow, [(9, 9**9)] + [(2, n) for n in range(20)])))
    thread.start()
    thread.join(timeout=30)
    assert [(o.status, o.value) for o in result["out"][1:]] == [(OK, 2**n) for n in range(20)]
    assert not thread.is_alive() and result["out"][0].status == TIMEOUT
    assert pool.submit(pow, 2, 10).result().value == 1024  # the replacement works


def test_waiting_in_the_queue_does_not_count_against_the_limit():
    with HardTimeoutPool(num_processes=1, timeout_s=1.0) as single:
        assert [o.status for o in single.map(time.sleep, [(0.6,)] * 3)] == [OK] * 3  # 1.8 s in all


def test_an_idle_worker_takes_an_item_while_another_runs(pool):
    running = pool.submit(time.sleep, 2.5)
    assert pool.submit(os.getpid).result().status == OK
    assert not running.done() and running.result().status == OK


@pytest.mark.parametrize(("fn", "args", "message"), [
    (int, ("not a number",), "ValueError: invalid literal"),  # the item's traceback
    (os._exit, (3,), "worker process died"),  # a worker that dies is replaced
    (pow, (lambda: 0, 2), "Can't pickle"),  # an argument that cannot be sent
])
def test_failures_are_reported_and_the_pool_goes_on(pool, fn, args, message):
    outcome = pool.submit(fn, *args).result(timeout=30)
    assert outcome.status == ERROR and message in outcome.error
    assert pool.submit(int, "12").result(timeout=30).value == 12


def test_a_cancelled_item_is_skipped_and_the_pool_goes_on(pool):  # asyncio cancels the futures it wraps
    running = [pool.submit(time.sleep, 0.5) for _ in range(2)]  # both workers busy: the items below wait
    assert all(pool.submit(pow, 2, 2).cancel() for _ in range(4))
    assert [f.result().status for f in running] == [OK, OK] and pool.submit(pow, 2, 5).result().value == 32


def test_workers_that_cannot_start_fail_items_instead_of_hanging():
    with HardTimeoutPool(num_processes=1, timeout_s=1.0, preload=("no_such_module_for_the_pool_test",)) as broken:
        outcome = broken.submit(pow, 2, 2).result(timeout=60)
    assert outcome.status == ERROR and "no_such_module_for_the_pool_test" in outcome.error


def test_close_resolves_running_and_queued_items_and_refuses_new_ones():
    pool = HardTimeoutPool(num_processes=1, timeout_s=5.0)
    running, queued = pool.submit(time.sleep, 2.0), pool.submit(pow, 2, 2)
    time.sleep(0.5)
    pool.close()
    assert running.result(timeout=5).status == queued.result(timeout=5).status == ERROR
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(pow, 2, 2)


@pytest.mark.parametrize("kwargs", [{"timeout_s": 0}, {"timeout_s": None}, {"num_processes": 0}])
def test_bad_settings_are_clear_errors(kwargs):
    with pytest.raises(ValueError, match="timeout_s|num_processes"):
        HardTimeoutPool(**{"num_processes": 1, "timeout_s": 1.0, **kwargs})
