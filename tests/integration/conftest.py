"""Fixtures: one broker process per test module (``broker``), or a fresh one (``new_broker``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.harness import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker shared by the tests of one module (topics are per test: use unique names)."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def new_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Factory for brokers owned by one test; all are stopped (by PID) afterwards."""
    started: list[BrokerProcess] = []

    def make(overrides: Mapping[str, str] | None = None, **kwargs: object) -> BrokerProcess:
        process = BrokerProcess(tmp_path / f"b{len(started)}", overrides, **kwargs)  # type: ignore[arg-type]
        started.append(process)
        return process.start()

    yield make
    for process in started:
        process.stop()
