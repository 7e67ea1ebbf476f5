"""The publishers' shared in-flight window and the load generators' CPU
(``tidelog.bench.common``): what every publisher may hold unacknowledged, and how a worker
measures its own CPU and a row records it."""

from __future__ import annotations

import threading
import time

import pytest

from tidelog.bench.common import (
    WINDOW_BYTES,
    WINDOW_RECORDS_MAX,
    ProcessCpu,
    client_bound,
    client_cpu,
    window,
)
from tidelog.bench.kafka import PRODUCER_BASE


@pytest.mark.parametrize(
    ("record_bytes", "records"),
    [
        (100, 335_544),  # 32 MiB // 100 B
        (1024, 32_768),
        (65_536, 512),
        (34, 986_895),  # the byte bound still binds
        (33, WINDOW_RECORDS_MAX),  # below 34 B librdkafka's message bound binds first
        (1, WINDOW_RECORDS_MAX),
        (64 << 20, 1),  # a record larger than the window still goes, alone
    ],
)
def test_the_window_is_32_mib_of_payload_or_a_million_records(
    record_bytes: int, records: int
) -> None:
    assert window(record_bytes) == {"bytes": 32 * 1024 * 1024, "records": records}


def test_the_kafka_producers_queue_is_the_same_window() -> None:
    assert PRODUCER_BASE["queue.buffering.max.kbytes"] * 1024 == WINDOW_BYTES
    assert PRODUCER_BASE["queue.buffering.max.messages"] == WINDOW_RECORDS_MAX


def test_process_cpu_counts_the_cpu_of_every_thread() -> None:
    """librdkafka sends from its own threads: a worker's CPU must include them. The main
    thread sleeps in join() while another thread burns 0.2 s of its own CPU."""

    def spin() -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.2:
            pass

    cpu = ProcessCpu()
    main_before = time.thread_time()
    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    main_used = time.thread_time() - main_before
    assert main_used < 0.1
    assert cpu.seconds() >= 0.2


def test_a_rows_client_cpu_is_its_busiest_process_share_of_a_core() -> None:
    results = [
        {"cpu_s": 4.5, "elapsed": 5.0},
        {"cpu_s": 1.0, "elapsed": 4.0},
    ]
    values = client_cpu(results)
    assert values == {"client_cpu": 0.9, "client_cpu_per_process": [0.9, 0.25]}
    assert client_bound(values)


@pytest.mark.parametrize(
    ("values", "bound"),
    [
        ({"client_cpu": 0.9}, True),
        ({"client_cpu": 1.4}, True),  # librdkafka's threads can take more than one core
        ({"client_cpu": 0.899}, False),
        ({}, False),  # a results file without client CPU
    ],
)
def test_client_bound_from_nine_tenths_of_a_core(values: dict[str, float], bound: bool) -> None:
    assert client_bound(values) is bound


def test_results_without_cpu_add_nothing_to_the_row() -> None:
    assert client_cpu([{"elapsed": 5.0}]) == {}
    assert client_cpu([{"cpu_s": 1.0, "elapsed": 0.0}]) == {}
