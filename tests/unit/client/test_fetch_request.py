"""The hand-written Fetch v12 request (a follower's, every round): byte-for-byte what kio
writes for the same request, over generated requests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.client.fetch import (
    HAND_WRITTEN_FETCH_VERSION,
    FetchRequestPartition,
    FetchTop,
    fetch_request,
    fetch_request_entity,
)
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import EncodedRequest, RequestHeader, decode_request, encode_request

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TOPIC = st.text(min_size=1, max_size=12)
TPS = st.builds(TopicPartition, TOPIC, st.integers(0, 2**31 - 1))
PARTITION = st.builds(FetchRequestPartition, I64, I32, I32, I32, I64)


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
    top = FetchTop(
        max_wait_ms, min_bytes, max_bytes, replica_id, isolation_level, session_id, session_epoch
    )
    ours = fetch_request(
        HAND_WRITTEN_FETCH_VERSION,
        partitions,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        replica_id=replica_id,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        forgotten=forgotten,
    )
    assert isinstance(ours, EncodedRequest)
    header = RequestHeader(ApiKey.FETCH, HAND_WRITTEN_FETCH_VERSION, 11, "replica-fetcher-2")
    kio_body = fetch_request_entity(HAND_WRITTEN_FETCH_VERSION, partitions, top, forgotten)
    expected = encode_request(header, kio_body)
    assert encode_request(header, ours) == expected
    _, decoded = decode_request(expected[4:])
    assert decoded == kio_body


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
