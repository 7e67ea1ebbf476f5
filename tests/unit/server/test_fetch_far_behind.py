"""A fetch far behind a log's end has what it will read brought into the page cache by a
worker thread first (``Log.uncached_range``, ``ReplicaManager.uncached_reads``,
``fetch_parts.start_when_loaded``): the read on the event loop then finds it in memory. A
fetch near the end, or one whose bytes the page cache holds, is read at once, as before.

The logs' pages are taken out of the page cache (fsync, ``POSIX_FADV_DONTNEED``); on a file
system that keeps them anyway (tmpfs) these tests are skipped."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, decode_response
from tidelog.protocol.messages import build
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.network.connection import Response
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.server.replica.reads import PartitionRead
from tidelog.storage import page_cache
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.log_manager import LogManager
from tidelog.storage.page_cache import STEP, Uncached

from ..residency import resident

VALUE = b"x" * 60_000
TP = TopicPartition("t", 0)


def evict(log: Log) -> None:
    """Every page of the log's segment files out of the page cache."""
    page_cache.settle()
    for segment in log._local.segments:
        os.fsync(segment.fd)
        os.posix_fadvise(segment.fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if any(resident(log._local.segments[0].fd)):
        pytest.skip("this file system keeps the pages in memory (tmpfs?)")


@pytest.fixture
def apis(tmp_path: Path) -> Iterator[KafkaApis]:
    """A broker alone keeping 8 MiB of each log cached, with 10 MiB in t-0."""
    config = load_broker_config(
        {"log.dirs": str(tmp_path), "tidelog.log.page.cache.keep.bytes": str(STEP)}
    )
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    apis = KafkaApis.alone(config, MetadataStore(tmp_path), ReplicaManager(config, logs), {})
    apis.create_topic("t", 1, {})
    for _ in range(10):
        batch = build_batch([Record(value=VALUE)] * 17, base_timestamp_ms=1)
        appended = apis.replica_manager.append_records({TP: batch}, 1)
        assert all(result.error == ErrorCode.NONE for result, _ in appended.values())
    evict(apis.replica_manager.partitions[TP].log)
    yield apis
    logs.close()


def fetch(apis: KafkaApis, offset: int) -> Any:
    body = build(
        load_request_schema(ApiKey.FETCH, 12),
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    )

    async def inside() -> Any:
        answer = apis.handlers[ApiKey.FETCH](RequestHeader(int(ApiKey.FETCH), 12, 1, "t"), body)
        if isinstance(answer, asyncio.Future):
            answer = await answer
        assert isinstance(answer, Response)
        frame = b"".join(
            part if isinstance(part, bytes) else part.read_bytes()  # type: ignore[attr-defined]
            for part in answer.parts
        )
        return decode_response(ApiKey.FETCH, 12, frame[4:])[1]

    return asyncio.run(inside())


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[tuple[int, int]]]]:
    """Each ``load_all``: the thread it ran on and its ranges (then it runs for real)."""
    seen: list[tuple[str, list[tuple[int, int]]]] = []
    real = page_cache.load_all

    def recording(ranges: Sequence[Uncached]) -> None:
        seen.append((threading.current_thread().name, [(r.offset, r.length) for r in ranges]))
        real(ranges)

    monkeypatch.setattr(page_cache, "load_all", recording)
    return seen


def records_of(answer: Any) -> bytes:
    (topic,) = answer.responses
    (partition,) = topic.partitions
    assert partition.error_code == ErrorCode.NONE
    return bytes(partition.records)


def test_a_fetch_far_behind_is_loaded_in_a_worker_then_answered(
    apis: KafkaApis, loads: list[tuple[str, list[tuple[int, int]]]]
) -> None:
    the_log = apis.replica_manager.partitions[TP].log
    answer = fetch(apis, 0)
    assert records_of(answer) == the_log.read_records(0, 1 << 20)
    assert len(loads) == 1
    thread, ranges = loads[0]
    assert thread != threading.current_thread().name
    assert ranges == [(0, (1 << 20) + 4096)]  # the index entry's position on, one fetch's worth


def test_a_fetch_near_the_end_is_read_at_once(
    apis: KafkaApis, loads: list[tuple[str, list[tuple[int, int]]]]
) -> None:
    the_log = apis.replica_manager.partitions[TP].log
    near = the_log.log_end_offset - 17
    assert records_of(fetch(apis, near)) == the_log.read_records(near, 1 << 20)
    assert loads == []


def test_a_fetch_far_behind_whose_bytes_are_cached_is_read_at_once(
    apis: KafkaApis, loads: list[tuple[str, list[tuple[int, int]]]]
) -> None:
    the_log = apis.replica_manager.partitions[TP].log
    the_log.read_records(0, 2 << 20)  # brings the first fetch's bytes back, and more
    assert the_log.uncached_range(0, 1 << 20) is None
    expected = the_log.read_records(0, 1 << 20)
    assert records_of(fetch(apis, 0)) == expected
    assert loads == []


def test_the_fetch_budget_bounds_what_is_loaded(apis: KafkaApis) -> None:
    requests = [PartitionRead(TP, 0, 1 << 20), PartitionRead(TP, 17, 1 << 20)]
    ranges = apis.replica_manager.uncached_reads(requests, 1 << 20)
    try:
        assert [(r.offset, r.length) for r in ranges] == [(0, (1 << 20) + 4096)]
    finally:
        page_cache.load_all(ranges)


def _log(tmp_path: Path, keep: int) -> Log:
    log = Log.open(
        tmp_path / "t-0",
        LogConfig(segment_bytes=6 * STEP, page_cache_keep_bytes=keep),
        now_ms=0,
    )
    batch = build_batch([Record(value=VALUE)] * 17, base_timestamp_ms=1)
    while log.size_bytes < 8 * STEP:  # two segments: the first full, 2 steps in the second
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    evict(log)
    return log


def test_only_reads_beyond_the_cached_tail_are_uncached(tmp_path: Path) -> None:
    log = _log(tmp_path, STEP)
    try:
        first, second = log.segment_base_offsets
        older = log.uncached_range(first, 1000)
        assert older is not None
        # In an older segment even a read next to its end: the kept tail is the newest bytes.
        in_older = log.uncached_range(second - 1, 1000)
        assert in_older is not None
        near_end = log.log_end_offset - 17
        assert log.uncached_range(near_end, 1000) is None
        assert log.uncached_range(log.log_end_offset, 1000) is None
        deep = log.uncached_range(second, 1000)  # 2 steps behind the end, keep is 1
        assert deep is not None
        assert (deep.offset, deep.length) == (0, 1000 + 4096)
        # Each range holds its own descriptor of the segment's file, which load_all closes.
        fds = [r.fd for r in (older, in_older, deep)]
        assert len(set(fds)) == 3
        assert os.fstat(deep.fd).st_ino != os.fstat(older.fd).st_ino
        page_cache.load_all([older, in_older, deep])
        for fd in fds:
            with pytest.raises(OSError, match="Bad file descriptor"):
                os.fstat(fd)
    finally:
        log.close()


def test_with_the_cache_left_to_the_kernel_nothing_is_uncached(tmp_path: Path) -> None:
    log = _log(tmp_path, -1)
    try:
        assert log.uncached_range(log.segment_base_offsets[0], 1000) is None
    finally:
        log.close()
