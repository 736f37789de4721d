"""jupyter_pause.store.workers: the process's threads, shared by every checkpoint; a lane keeps
one writer's tasks in order, one at a time, beside another lane's."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError

import pytest

from jupyter_pause.store import workers


def test_one_executor_per_name_for_the_whole_process():
    assert workers.shared("jupyter-pause-test", 2) is workers.shared("jupyter-pause-test", 2)
    assert workers.shared("jupyter-pause-test", 2) is not workers.shared("jupyter-pause-test-other", 2)


def test_a_lane_runs_its_tasks_in_order_one_at_a_time_beside_another_lane():
    executor = workers.shared("jupyter-pause-test-lanes", 4)
    first, second = workers.Lane(executor), workers.Lane(executor)
    ran: list[str] = []
    running = threading.Semaphore(1)  # taken by a task of ``first`` while it runs
    gate = threading.Event()

    def step(name: str) -> str:
        assert running.acquire(blocking=False), "two tasks of one lane ran at once"
        try:
            if name == "a0":
                assert gate.wait(30)
            ran.append(name)
            return name
        finally:
            running.release()

    done = [first.submit(step, f"a{i}") for i in range(5)]
    beside = second.submit(lambda: "b")  # not behind the first lane's waiting task
    assert beside.result(30) == "b" and ran == []
    gate.set()
    assert [f.result(30) for f in done] == ["a0", "a1", "a2", "a3", "a4"] and ran == ["a0", "a1", "a2", "a3", "a4"]


def test_a_task_cancelled_before_it_starts_is_passed_over_and_the_next_still_waits():
    lane = workers.Lane(workers.shared("jupyter-pause-test-lanes", 4))
    gate, order = threading.Event(), []

    def held() -> None:
        assert gate.wait(30)
        order.append("held")

    running = lane.submit(held)
    cancelled = lane.submit(order.append, "cancelled")
    after = lane.submit(order.append, "after")
    assert cancelled.cancel()
    assert not after.done()  # it still waits for the task running, not for the one cancelled
    gate.set()
    after.result(30)
    assert running.done() and order == ["held", "after"]
    with pytest.raises(CancelledError):
        cancelled.result(0)


def test_a_failing_task_holds_its_error_and_the_lane_goes_on():
    lane = workers.Lane(workers.shared("jupyter-pause-test-lanes", 4))
    failed = lane.submit(lambda: 1 / 0)
    assert lane.submit(lambda: "next").result(30) == "next"
    with pytest.raises(ZeroDivisionError):
        failed.result(0)
