"""The hand-written Fetch v12 request (a follower's, every round): byte-for-byte what kio
writes for the same request, over generated requests."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.client.fetch import (
    HAND_WRITTEN_FETCH_VERSION,
    FetchRequestPartition,
    fetch_request,
)
from tidelog.client.wire import schema_module
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import EncodedRequest, RequestHeader, decode_request, encode_request

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TOPIC = st.text(min_size=1, max_size=12)
TPS = st.builds(TopicPartition, TOPIC, st.integers(0, 2**31 - 1))
PARTITION = st.builds(FetchRequestPartition, I64, I32, I32, I32, I64)


def kio_fetch(
    partitions: dict[TopicPartition, FetchRequestPartition],
    forgotten: list[TopicPartition],
    top: dict[str, int],
) -> Any:
    """The same request built as kio entities (topics and partitions in first-seen order)."""
    m = schema_module(ApiKey.FETCH, HAND_WRITTEN_FETCH_VERSION)
    by_topic: dict[str, list[Any]] = {}
    for tp, spec in partitions.items():
        by_topic.setdefault(tp.topic, []).append(
            m.FetchPartition(
                partition=tp.partition,
                current_leader_epoch=spec.current_leader_epoch,
                fetch_offset=spec.fetch_offset,
                last_fetched_epoch=spec.last_fetched_epoch,
                log_start_offset=spec.log_start_offset,
                partition_max_bytes=spec.partition_max_bytes,
            )
        )
    gone: dict[str, list[int]] = {}
    for tp in forgotten:
        gone.setdefault(tp.topic, []).append(tp.partition)
    return m.FetchRequest(
        replica_id=top["replica_id"],
        max_wait=datetime.timedelta(milliseconds=top["max_wait_ms"]),
        min_bytes=top["min_bytes"],
        max_bytes=top["max_bytes"],
        isolation_level=top["isolation_level"],
        session_id=top["session_id"],
        session_epoch=top["session_epoch"],
        topics=tuple(m.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=tuple(
            m.ForgottenTopic(topic=t, partitions=tuple(ps)) for t, ps in gone.items()
        ),
        rack_id="",
    )


@settings(max_examples=300, deadline=None)
@given(
    partitions=st.dictionaries(TPS, PARTITION, max_size=6),
    forgotten=st.lists(TPS, max_size=4),
    replica_id=I32,
    max_wait_ms=st.integers(0, 2**31 - 1),
    min_bytes=I32,
    max_bytes=I32,
    isolation_level=st.sampled_from([0, 1]),
    session_id=I32,
    session_epoch=I32,
)
def test_fetch_v12_matches_kio(  # noqa: PLR0917 (Hypothesis passes keywords)
    partitions: dict[TopicPartition, FetchRequestPartition],
    forgotten: list[TopicPartition],
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    session_id: int,
    session_epoch: int,
) -> None:
    top = {
        "replica_id": replica_id,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": session_id,
        "session_epoch": session_epoch,
    }
    ours = fetch_request(HAND_WRITTEN_FETCH_VERSION, partitions, forgotten=forgotten, **top)
    assert isinstance(ours, EncodedRequest)
    header = RequestHeader(ApiKey.FETCH, HAND_WRITTEN_FETCH_VERSION, 11, "replica-fetcher-2")
    expected = encode_request(header, kio_fetch(partitions, forgotten, top))
    assert encode_request(header, ours) == expected
    _, decoded = decode_request(expected[4:])
    assert decoded == kio_fetch(partitions, forgotten, top)


def test_other_versions_stay_kio_entities() -> None:
    request = fetch_request(
        11,
        {TopicPartition("t", 0): FetchRequestPartition(5)},
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        replica_id=2,
        isolation_level=0,
    )
    assert not isinstance(request, EncodedRequest)
    assert int(request.__version__) == 11


def test_an_encoded_body_of_another_api_is_refused() -> None:
    header = RequestHeader(ApiKey.FETCH, 12, 1, None)
    with pytest.raises(ValueError, match="EncodedRequest is not a FETCH v12 request"):
        encode_request(header, EncodedRequest(ApiKey.PRODUCE, 12, b""))
