"""storage.serial_worker: calls run in order on one thread; a failing call is logged and
the worker goes on."""

from __future__ import annotations

import logging
import threading

import pytest

from tidelog.storage.serial_worker import SerialWorker


def test_calls_run_in_order_on_one_named_thread() -> None:
    worker = SerialWorker("test-worker")
    ran: list[tuple[int, str]] = []
    for i in range(5):
        worker.submit(lambda i=i: ran.append((i, threading.current_thread().name)))
    worker.settle()
    assert ran == [(i, "test-worker") for i in range(5)]
    assert worker.pending() == 0


def test_a_failing_call_is_logged_and_the_next_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = SerialWorker("test-worker")
    ran: list[str] = []

    def fail() -> None:
        raise OSError("disk gone")

    with caplog.at_level(logging.ERROR, logger="tidelog.storage.serial_worker"):
        worker.submit(fail)
        worker.submit(lambda: ran.append("after"))
        worker.settle()
    assert ran == ["after"]
    [record] = caplog.records
    assert record.getMessage() == "test-worker: a queued call failed"
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], OSError)
