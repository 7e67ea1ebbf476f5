"""The parts of a Fetch that ``DataApis.handle_fetch`` puts together: the fetching replica's
id, the plan of what a Fetch reads (``DataApis._fetch_plan``), when a fetch far behind a
log's end starts (``start_when_loaded``), and one read partition's answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidelog.protocol.records import Compression, uses_codec
from tidelog.protocol.responses import FetchPartitionResponse
from tidelog.server.replica.reads import FetchResult, PartitionRead
from tidelog.storage import page_cache
from tidelog.storage.log import FetchSlice
from tidelog.storage.page_cache import Uncached


def holds_zstd(records: FetchSlice | None) -> bool:
    """Whether fetched records hold a zstd batch (read only for Fetch below v10)."""
    if records is None or records.length == 0:
        return False
    try:
        return uses_codec(records.read_bytes(), Compression.ZSTD)
    except OSError:
        return False


def fetch_replica_id(body: Any) -> int:
    """A Fetch's replica id: top-level before v15, inside replica_state from v15 (KIP-903)."""
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        return int(replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


@dataclass(slots=True)
class FetchPlan:
    """What a Fetch reads, split by how each partition is answered; the lists hold indexes
    into the fetch context's partitions."""

    replica_id: int
    #: The partitions to read, and their indexes, in order.
    requests: list[PartitionRead] = field(default_factory=list)
    read: list[int] = field(default_factory=list)
    #: A follower's session fetch: the partitions it parked, quiet for the follower
    #: (``fetch_session`` rule 7; not read, no news)...
    parked: list[int] = field(default_factory=list)
    #: ...and those its session woke while the fetch waited, appended to the context's
    #: partitions and read after ``read``.
    woken: list[int] = field(default_factory=list)
    #: Partitions of unknown topic ids (UNKNOWN_TOPIC_ID).
    unknown: list[int] = field(default_factory=list)
    #: Partitions refused by the authorizer (TOPIC_AUTHORIZATION_FAILED).
    refused: list[int] = field(default_factory=list)


def partition_answer(
    partition: int, result: FetchResult, current_leader: tuple[int, int]
) -> FetchPartitionResponse:
    """One read partition's answer (``current_leader``: KIP-951's hint, (-1, -1) for
    none)."""
    return FetchPartitionResponse(
        partition_index=partition,
        error_code=int(result.error),
        high_watermark=result.high_watermark,
        last_stable_offset=result.last_stable_offset,
        log_start_offset=result.log_start_offset,
        # KIP-98: read_committed consumers drop these transactions' records.
        aborted_transactions=result.aborted_transactions or (),
        # Records go out with sendfile straight from the segment file; empty records are
        # b"", never null (PROTOCOL_NOTES: kafka-python crashes, librdkafka stops reporting
        # the end of the partition).
        records=result.records if result.records is not None else b"",
        current_leader=current_leader,
        preferred_read_replica=result.preferred_read_replica,
    )


def start_when_loaded(
    start: Callable[[], None], ranges: Sequence[Uncached], answer: asyncio.Future[Any]
) -> None:
    """Start a fetch now, or once a worker thread has brought into the page cache what it
    would otherwise read from the disk on the event loop (``ranges``: a consumer or follower
    far behind a log's end, ``ReplicaManager.uncached_reads``). A fetch that then fails
    fails ``answer`` (the connection closes, as for any failed delayed answer)."""
    if not ranges:
        start()
        return

    def begin(_loaded: asyncio.Future[None]) -> None:
        try:
            start()
        except Exception as exc:
            if not answer.done():
                answer.set_exception(exc)

    loaded = asyncio.ensure_future(asyncio.to_thread(page_cache.load_all, ranges))
    loaded.add_done_callback(begin)


__all__ = ["FetchPlan", "fetch_replica_id", "holds_zstd", "partition_answer", "start_when_loaded"]
