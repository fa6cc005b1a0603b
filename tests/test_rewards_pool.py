"""The hard-timeout process pool: results equal serial scoring, items over the limit are killed from any
thread (even while holding the interpreter lock), failures are reported, never raised or hung on."""

import json
import os
import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dara import SAMPLE_DATA
from rewards import math as math_reward
from rewards.pool import ERROR, OK, TIMEOUT, HardTimeoutPool
from rewards.verl_entry import RewardOptions, score_sample

# pow(9, 9**9) has 370 million digits: a C-level loop that holds the GIL for minutes.
GIL_HOLDING_ITEM = (pow, 9, 9**9)
# Generous for real items on a loaded 2-core machine (warm items take milliseconds).
LIMIT_S = 3.0


@pytest.fixture(scope="module")
def pool():
    with HardTimeoutPool(num_processes=2, timeout_s=LIMIT_S, preload=("rewards.warm",)) as shared:
        yield shared


def test_pool_results_equal_serial_scoring(pool):
    rows = json.loads((SAMPLE_DATA / "math_benchmarks" / "math.json").read_text())
    rows = random.Random(0).sample(rows, 16)
    items = []
    for index, row in enumerate(rows):
        other = rows[(index + 1) % len(rows)]["answer"]
        guess = row["answer"] if index % 2 else other
        items.append((f"<think> ... </think> \\boxed{{{guess}}}", row["answer"], 100 * index))
    serial = [math_reward.score(*item) for item in items]
    outcomes = pool.map(math_reward.score, items)
    assert [o.status for o in outcomes] == [OK] * len(items)
    assert [o.value for o in outcomes] == serial
    assert {s["correctness"] for s in serial} == {0.0, 1.0}


def test_a_gil_holding_item_is_killed_from_a_thread_the_items_behind_it_run_on_and_the_pool_recovers(pool):
    before = pool.stats.timeouts, pool.stats.restarts, pool.stats.errors
    result = {}

    def map_from_thread():
        result["outcomes"] = pool.map(pow, [GIL_HOLDING_ITEM[1:]] + [(2, n) for n in range(20)])

    thread = threading.Thread(target=map_from_thread)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert result["outcomes"][0].status == TIMEOUT
    assert [o.value for o in result["outcomes"][1:]] == [2**n for n in range(20)]
    # only the item over the limit was killed: the items queued behind it on its worker ran on
    assert (pool.stats.timeouts, pool.stats.restarts, pool.stats.errors) == (before[0] + 1, before[1] + 1, before[2])
    assert pool.submit(pow, 2, 10).result().value == 1024  # the replacement works


def test_waiting_in_the_queue_does_not_count_against_the_limit():
    with HardTimeoutPool(num_processes=1, timeout_s=1.0) as single:
        outcomes = single.map(time.sleep, [(0.6,)] * 3)  # 1.8 s in all, 0.6 s each
    assert [o.status for o in outcomes] == [OK] * 3


def test_item_errors_are_reported_with_their_traceback(pool):
    outcome = pool.submit(int, "not a number").result()
    assert outcome.status == ERROR
    assert "ValueError" in outcome.error and "not a number" in outcome.error
    assert pool.submit(int, "12").result().value == 12


def test_a_worker_killed_from_outside_is_reported_and_replaced(pool):
    future = pool.submit(time.sleep, 1.0)
    time.sleep(0.3)
    busy = [w.process.pid for w in pool._workers if w.tasks]
    assert len(busy) == 1
    os.kill(busy[0], 9)
    outcome = future.result(timeout=10)
    assert outcome.status == ERROR and "died" in outcome.error
    assert pool.submit(pow, 3, 3).result(timeout=10).value == 27


def test_workers_that_cannot_start_fail_items_instead_of_hanging():
    broken = HardTimeoutPool(num_processes=1, timeout_s=1.0, preload=("no_such_module_for_the_pool_test",))
    try:
        outcome = broken.submit(pow, 2, 2).result(timeout=60)
        assert outcome.status == ERROR and "no_such_module_for_the_pool_test" in outcome.error
    finally:
        broken.close()


def test_close_resolves_queued_items_and_refuses_new_ones():
    pool = HardTimeoutPool(num_processes=1, timeout_s=5.0)
    running = pool.submit(time.sleep, 2.0)
    queued = pool.submit(pow, 2, 2)
    time.sleep(0.5)
    pool.close()
    assert running.result(timeout=5).status == ERROR
    assert queued.result(timeout=5).status == ERROR
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(pow, 2, 2)


@pytest.mark.parametrize("kwargs", [{"timeout_s": 0}, {"timeout_s": None}, {"num_processes": 0}])
def test_bad_settings_are_clear_errors(kwargs):
    with pytest.raises(ValueError):
        HardTimeoutPool(**{"num_processes": 1, "timeout_s": 1.0, **kwargs})


def test_items_spread_over_idle_workers_before_queueing_behind_busy_ones(pool):
    for _ in range(600):  # a worker replaced by an earlier test may still be starting (up to a minute)
        if all(worker.ready for worker in pool._workers):
            break
        time.sleep(0.1)
    assert all(worker.ready for worker in pool._workers), "the pool's workers never became ready"
    outcomes = pool.map(os.getpid, [(), ()])  # two idle workers: one item each, not both on the first
    assert [o.status for o in outcomes] == [OK, OK]
    assert len({o.value for o in outcomes}) == 2


ADVERSARIAL_ALPHABET = [
    "\\boxed{",
    "}",
    "{",
    "^{",
    "!",
    "9",
    "99",
    "(",
    ")",
    "\\frac",
    "x",
    "+",
    ",",
    "</think>",
    " ",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(ADVERSARIAL_ALPHABET), max_size=24).map("".join))
def test_random_latex_through_the_pool_never_errors(pool, response):
    options = RewardOptions()
    outcome = pool.submit(score_sample, "math500", response, "2", 10, options).result()
    assert outcome.status in (OK, TIMEOUT)  # a model's text is scored or timed out, never an error
    if outcome.status == OK:
        assert outcome.value["correctness"] in (0.0, 1.0) and outcome.value["length"] == 1.0
