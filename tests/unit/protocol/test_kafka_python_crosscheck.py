"""Cross-check against kafka-python's independent ``kafka.protocol`` codec.

Requests kafka-python encodes (as the clients send them) must decode with our codec to the
same fields; responses our fast encoders write must decode with kafka-python to the fields
we put in.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from tidelog.protocol.codec import (
    RequestHeader,
    api_versions_response,
    decode_request,
    encode_response,
)
from tidelog.protocol.responses import (
    FetchPartitionResponse,
    FetchTopicResponse,
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_fetch_response,
    encode_produce_response,
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
NAME = st.text(min_size=1, max_size=10)


def _with_header(request: object, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="kafka-python")  # type: ignore[attr-defined]
    return bytes(request.encode(header=True))  # type: ignore[attr-defined]


# kafka-python 3.0 uses Produce v9, Fetch v12; kcat Produce v7 / Fetch v11; librdkafka
# Produce v10 / Fetch v16 (PROTOCOL_NOTES.md).
@settings(max_examples=60)
@given(
    version=st.sampled_from([3, 7, 9, 10, 12]),
    correlation_id=I32,
    topic=NAME,
    partition=I32,
    records=st.binary(max_size=64),
    acks=st.sampled_from([-1, 0, 1]),
)
def test_produce_requests_from_kafka_python_decode_alike(  # noqa: PLR0917 (Hypothesis passes keywords)
    version: int, correlation_id: int, topic: str, partition: int, records: bytes, acks: int
) -> None:
    td = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        version=version,
        transactional_id=None,
        acks=acks,
        timeout_ms=1500,
        topic_data=[
            td(
                name=topic,
                partition_data=[td.PartitionProduceData(index=partition, records=records)],
            )
        ],
    )
    header, body = decode_request(_with_header(request, correlation_id))
    assert header == RequestHeader(0, version, correlation_id, "kafka-python")
    assert body.acks == acks
    assert body.timeout.total_seconds() == 1.5
    (topic_data,) = body.topic_data
    assert topic_data.name == topic
    (part,) = topic_data.partition_data
    assert (part.index, part.records) == (partition, records)


@settings(max_examples=60)
@given(
    version=st.sampled_from([4, 11, 12, 16]),
    correlation_id=I32,
    topic=NAME,
    topic_id=st.uuids(),
    offset=I64,
    epoch=I32,
)
def test_fetch_requests_from_kafka_python_decode_alike(  # noqa: PLR0917 (Hypothesis passes keywords)
    version: int, correlation_id: int, topic: str, topic_id: uuid.UUID, offset: int, epoch: int
) -> None:
    ft = FetchRequest.FetchTopic
    fp = ft.FetchPartition
    name_kw = {"topic_id": topic_id} if version >= 13 else {"topic": topic}
    request = FetchRequest(
        version=version,
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        topics=[
            ft(
                **name_kw,
                partitions=[
                    fp(
                        partition=3,
                        fetch_offset=offset,
                        partition_max_bytes=1024,
                        current_leader_epoch=epoch,
                    )
                ],
            )
        ],
    )
    header, body = decode_request(_with_header(request, correlation_id))
    assert header == RequestHeader(1, version, correlation_id, "kafka-python")
    (t,) = body.topics
    assert (t.topic_id if version >= 13 else t.topic) == (topic_id if version >= 13 else topic)
    (p,) = t.partitions
    assert (p.partition, p.fetch_offset, p.partition_max_bytes) == (3, offset, 1024)
    if version >= 9:
        assert p.current_leader_epoch == epoch
    assert body.max_wait.total_seconds() == 0.5
    assert body.isolation_level == 1


@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_api_versions_both_ways(version: int) -> None:
    kw = {"client_software_name": "kp", "client_software_version": "3"} if version >= 3 else {}
    request = ApiVersionsRequest(version=version, **kw)
    header, _body = decode_request(_with_header(request, 77))
    assert header == RequestHeader(18, version, 77, "kafka-python")
    wire = encode_response(header, api_versions_response(version))
    theirs = ApiVersionsResponse.decode(wire[4:], version=version, header=True)
    assert theirs.header.correlation_id == 77
    assert {(k.api_key, k.min_version, k.max_version) for k in theirs.api_keys} >= {
        (3, 4, 13),
        (0, 3, 12),
        (1, 4, 18),
    }


@pytest.mark.parametrize("version", [4, 9, 12, 13])
def test_metadata_requests_from_kafka_python_decode_alike(version: int) -> None:
    mt = MetadataRequest.MetadataRequestTopic
    request = MetadataRequest(
        version=version, topics=[mt(name="a"), mt(name="b")], allow_auto_topic_creation=False
    )
    _header, body = decode_request(_with_header(request, 1))
    assert [t.name for t in body.topics] == ["a", "b"]
    assert body.allow_auto_topic_creation is False


@settings(max_examples=60)
@given(
    version=st.sampled_from([3, 5, 7, 8, 9, 10, 12]),
    correlation_id=I32,
    topic=NAME,
    base_offset=I64,
    error_code=st.sampled_from([0, 6, 19, 20]),
    message=st.one_of(st.none(), NAME),
)
def test_produce_responses_decode_in_kafka_python(  # noqa: PLR0917 (Hypothesis passes keywords)
    version: int,
    correlation_id: int,
    topic: str,
    base_offset: int,
    error_code: int,
    message: str | None,
) -> None:
    wire = encode_produce_response(
        correlation_id,
        version,
        [
            ProduceTopicResponse(
                name=topic,
                partitions=[
                    ProducePartitionResponse(
                        index=2,
                        error_code=error_code,
                        base_offset=base_offset,
                        log_start_offset=5,
                        error_message=message,
                    )
                ],
            )
        ],
        throttle_time_ms=3,
    )
    theirs = ProduceResponse.decode(wire[4:], version=version, header=True)
    assert theirs.header.correlation_id == correlation_id
    (t,) = theirs.responses
    assert t.name == topic
    (p,) = t.partition_responses
    assert (p.index, p.error_code, p.base_offset) == (2, error_code, base_offset)
    if version >= 5:
        assert p.log_start_offset == 5
    if version >= 8:
        assert p.error_message == message
    assert theirs.throttle_time_ms == 3


@settings(max_examples=60)
@given(
    version=st.sampled_from([4, 7, 11, 12, 13, 16]),
    correlation_id=I32,
    topic=NAME,
    topic_id=st.uuids(),
    high_watermark=I64,
    records=st.binary(max_size=64),
    current_leader=st.one_of(st.just((-1, -1)), st.tuples(I32, I32)),
    diverging=st.one_of(st.just((-1, -1)), st.tuples(I32, I64)),
)
def test_fetch_responses_decode_in_kafka_python(  # noqa: PLR0917 (Hypothesis passes keywords)
    version: int,
    correlation_id: int,
    topic: str,
    topic_id: uuid.UUID,
    high_watermark: int,
    records: bytes,
    current_leader: tuple[int, int],
    diverging: tuple[int, int],
) -> None:
    (wire,) = encode_fetch_response(
        correlation_id,
        version,
        [
            FetchTopicResponse(
                topic=topic,
                topic_id=topic_id,
                partitions=[
                    FetchPartitionResponse(
                        partition_index=1,
                        high_watermark=high_watermark,
                        last_stable_offset=high_watermark,
                        log_start_offset=0,
                        records=records,
                        current_leader=current_leader,
                        diverging_epoch=diverging,
                    )
                ],
            )
        ],
        session_id=0,
    )
    assert isinstance(wire, bytes)
    theirs = FetchResponse.decode(wire[4:], version=version, header=True)
    assert theirs.header.correlation_id == correlation_id
    (t,) = theirs.responses
    if version >= 13:
        assert t.topic_id == topic_id
    else:
        assert t.topic == topic
    (p,) = t.partitions
    assert p.partition_index == 1
    assert p.high_watermark == high_watermark
    assert bytes(p.records) == records
    if version >= 12:
        leader = p.current_leader
        got = (-1, -1) if leader is None else (leader.leader_id, leader.leader_epoch)
        assert got == current_leader
        div = p.diverging_epoch
        got_div = (-1, -1) if div is None else (div.epoch, div.end_offset)
        assert got_div == diverging
