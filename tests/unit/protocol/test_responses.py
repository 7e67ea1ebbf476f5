"""Fast Produce/Fetch encoders: byte-for-byte equal to kio over generated responses."""

from __future__ import annotations

import datetime
import importlib
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode

from tidelog.protocol.codec import RequestHeader, decode_response, encode_response
from tidelog.protocol.responses import (
    INLINE_RECORDS_MAX,
    FetchPartitionResponse,
    FetchTopicResponse,
    NodeEndpoint,
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_fetch_response,
    encode_produce_response,
)

PRODUCE = 0
FETCH = 1
# Kafka error codes kio knows (it refuses codes outside its enum).
ERROR_CODES = st.sampled_from([int(code) for code in KioErrorCode])
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
PAIR32 = st.one_of(st.just((-1, -1)), st.tuples(I32, I32))
EPOCH_OFFSET = st.one_of(st.just((-1, -1)), st.tuples(I32, I64))
OFFSET_EPOCH = st.one_of(st.just((-1, -1)), st.tuples(I64, I32))
TEXT = st.text(max_size=12)
UUIDS = st.one_of(st.none(), st.uuids())
NODES = st.lists(st.builds(NodeEndpoint, I32, TEXT, I32, st.one_of(st.none(), TEXT)), max_size=3)


def _module(api_key: int, version: int) -> Any:
    return importlib.import_module(load_response_schema(api_key, version).__module__)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def kio_produce(
    version: int, topics: list[ProduceTopicResponse], throttle: int, nodes: list[NodeEndpoint]
) -> Any:
    m = _module(PRODUCE, version)
    kio_topics = []
    for topic in topics:
        partitions = []
        for p in topic.partitions:
            kw: dict[str, Any] = {
                "index": p.index,
                "error_code": KioErrorCode(p.error_code),
                "base_offset": p.base_offset,
                "log_append_time": None
                if p.log_append_time_ms == -1
                else datetime.datetime.fromtimestamp(p.log_append_time_ms / 1000, datetime.UTC),
            }
            if version >= 5:
                kw["log_start_offset"] = p.log_start_offset
            if version >= 8:
                kw["record_errors"] = tuple(
                    m.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=e)
                    for i, e in p.record_errors
                )
                kw["error_message"] = p.error_message
            if version >= 10:
                kw["current_leader"] = m.LeaderIdAndEpoch(
                    leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                )
            partitions.append(m.PartitionProduceResponse(**kw))
        name_kw = {"topic_id": topic.topic_id} if version >= 13 else {"name": topic.name}
        kio_topics.append(m.TopicProduceResponse(**name_kw, partition_responses=tuple(partitions)))
    kw = {"responses": tuple(kio_topics), "throttle_time": _ms(throttle)}
    if version >= 10:
        kw["node_endpoints"] = tuple(
            m.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack) for n in nodes
        )
    return m.ProduceResponse(**kw)


def kio_fetch(
    version: int,
    *,
    topics: list[FetchTopicResponse],
    throttle: int,
    error: int,
    session: int,
    nodes: list[NodeEndpoint],
) -> Any:
    m = _module(FETCH, version)
    kio_topics = []
    for topic in topics:
        partitions = []
        for p in topic.partitions:
            assert isinstance(p.records, bytes)
            kw: dict[str, Any] = {
                "partition_index": p.partition_index,
                "error_code": KioErrorCode(p.error_code),
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "aborted_transactions": None
                if p.aborted_transactions is None
                else tuple(
                    m.AbortedTransaction(producer_id=a, first_offset=b)
                    for a, b in p.aborted_transactions
                ),
                "records": p.records,
            }
            if version >= 5:
                kw["log_start_offset"] = p.log_start_offset
            if version >= 11:
                kw["preferred_read_replica"] = p.preferred_read_replica
            if version >= 12:
                kw["diverging_epoch"] = m.EpochEndOffset(
                    epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
                )
                kw["current_leader"] = m.LeaderIdAndEpoch(
                    leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                )
                kw["snapshot_id"] = m.SnapshotId(
                    end_offset=p.snapshot_id[0], epoch=p.snapshot_id[1]
                )
            partitions.append(m.PartitionData(**kw))
        name_kw = {"topic_id": topic.topic_id} if version >= 13 else {"topic": topic.topic}
        kio_topics.append(m.FetchableTopicResponse(**name_kw, partitions=tuple(partitions)))
    kw = {"responses": tuple(kio_topics), "throttle_time": _ms(throttle)}
    if version >= 7:
        kw["error_code"] = KioErrorCode(error)
        kw["session_id"] = session
    if version >= 16:
        kw["node_endpoints"] = tuple(
            m.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack) for n in nodes
        )
    return m.FetchResponse(**kw)


produce_partitions = st.builds(
    ProducePartitionResponse,
    index=I32,
    error_code=ERROR_CODES,
    base_offset=I64,
    # kio goes through a float datetime: keep to times it represents exactly.
    log_append_time_ms=st.one_of(st.just(-1), st.integers(0, 2**41)),
    log_start_offset=I64,
    record_errors=st.lists(st.tuples(I32, st.one_of(st.none(), TEXT)), max_size=2),
    error_message=st.one_of(st.none(), TEXT),
    current_leader=PAIR32,
)
produce_topics = st.lists(
    st.builds(
        ProduceTopicResponse,
        name=TEXT,
        topic_id=UUIDS,
        partitions=st.lists(produce_partitions, max_size=3),
    ),
    max_size=3,
)

fetch_partitions = st.builds(
    FetchPartitionResponse,
    partition_index=I32,
    error_code=ERROR_CODES,
    high_watermark=I64,
    last_stable_offset=I64,
    log_start_offset=I64,
    diverging_epoch=EPOCH_OFFSET,
    current_leader=PAIR32,
    snapshot_id=OFFSET_EPOCH,
    aborted_transactions=st.one_of(st.none(), st.lists(st.tuples(I64, I64), max_size=2)),
    preferred_read_replica=I32,
    records=st.one_of(st.binary(max_size=200), st.just(b"\x07" * (INLINE_RECORDS_MAX + 3))),
)
fetch_topics = st.lists(
    st.builds(
        FetchTopicResponse,
        topic=TEXT,
        topic_id=UUIDS,
        partitions=st.lists(fetch_partitions, max_size=3),
    ),
    max_size=3,
)


@settings(max_examples=300)
@given(
    version=st.integers(3, 13),
    correlation_id=I32,
    topics=produce_topics,
    throttle=st.integers(0, 2**31 - 1),
    nodes=NODES,
)
def test_produce_response_matches_kio(
    version: int,
    correlation_id: int,
    topics: list[ProduceTopicResponse],
    throttle: int,
    nodes: list[NodeEndpoint],
) -> None:
    expected = encode_response(
        RequestHeader(PRODUCE, version, correlation_id),
        kio_produce(version, topics, throttle, nodes),
    )
    got = encode_produce_response(
        correlation_id, version, topics, throttle_time_ms=throttle, node_endpoints=nodes
    )
    assert got == expected


@settings(max_examples=300)
@given(
    version=st.integers(4, 18),
    correlation_id=I32,
    topics=fetch_topics,
    throttle=st.integers(0, 2**31 - 1),
    error=ERROR_CODES,
    session=I32,
    nodes=NODES,
)
def test_fetch_response_matches_kio(  # noqa: PLR0917 (Hypothesis passes keywords)
    version: int,
    correlation_id: int,
    topics: list[FetchTopicResponse],
    throttle: int,
    error: int,
    session: int,
    nodes: list[NodeEndpoint],
) -> None:
    expected = encode_response(
        RequestHeader(FETCH, version, correlation_id),
        kio_fetch(
            version, topics=topics, throttle=throttle, error=error, session=session, nodes=nodes
        ),
    )
    chunks = encode_fetch_response(
        correlation_id,
        version,
        topics,
        throttle_time_ms=throttle,
        error_code=error,
        session_id=session,
        node_endpoints=nodes,
    )
    assert all(isinstance(chunk, bytes) for chunk in chunks)
    assert b"".join(chunks) == expected  # type: ignore[arg-type]


@dataclass(frozen=True)
class Region:
    """Stands for a segment file slice: the encoder only reads ``length``."""

    length: int
    fill: bytes

    def read(self) -> bytes:
        return self.fill * self.length


@pytest.mark.parametrize("version", [4, 11, 12, 16, 18])
def test_fetch_regions_are_returned_as_markers_with_lengths_counted(version: int) -> None:
    regions = [Region(70000, b"a"), Region(5, b"b")]
    topics = [
        FetchTopicResponse(
            topic="t",
            topic_id=uuid.UUID(int=7),
            partitions=[
                FetchPartitionResponse(partition_index=0, high_watermark=9, records=regions[0]),
                FetchPartitionResponse(partition_index=1, error_code=1),
                FetchPartitionResponse(partition_index=2, high_watermark=3, records=regions[1]),
            ],
        )
    ]
    chunks = encode_fetch_response(5, version, topics)
    assert [c for c in chunks if not isinstance(c, bytes)] == regions
    # Substituting each region's bytes gives exactly what kio encodes for the same data.
    wire = b"".join(c if isinstance(c, bytes) else c.read() for c in chunks)  # type: ignore[union-attr]
    same_in_memory = [
        FetchTopicResponse(
            topic="t",
            topic_id=uuid.UUID(int=7),
            partitions=[
                FetchPartitionResponse(partition_index=0, high_watermark=9, records=b"a" * 70000),
                FetchPartitionResponse(partition_index=1, error_code=1),
                FetchPartitionResponse(partition_index=2, high_watermark=3, records=b"bbbbb"),
            ],
        )
    ]
    assert wire == encode_response(
        RequestHeader(FETCH, version, 5),
        kio_fetch(version, topics=same_in_memory, throttle=0, error=0, session=0, nodes=[]),
    )


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_empty_records_are_an_empty_string_not_null(version: int) -> None:
    topics = [FetchTopicResponse(topic="t", partitions=[FetchPartitionResponse(partition_index=0)])]
    (wire,) = encode_fetch_response(1, version, topics)
    assert isinstance(wire, bytes)
    _cid, body = decode_response(FETCH, version, wire[4:])
    assert body.responses[0].partitions[0].records == b""
    # Legacy bytes: length 0 (not -1); compact bytes: 1 (not 0) = length + 1.
    records_length = b"\x01" if version >= 12 else b"\x00\x00\x00\x00"
    tail = b"\x00\x00\x00" if version >= 12 else b""  # partition, topic, top-level tags
    assert wire.endswith(records_length + tail)


def test_versions_outside_the_range_are_refused() -> None:
    with pytest.raises(ValueError, match="Fetch v3 is not supported"):
        encode_fetch_response(1, 3, [])
    with pytest.raises(ValueError, match="Produce v14 is not supported"):
        encode_produce_response(1, 14, [])
