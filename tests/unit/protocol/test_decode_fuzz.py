"""Fuzz decode_request: random and mutated frames raise only the documented exceptions.

Whatever a peer sends, ``decode_request`` either returns a (header, body) pair or raises
one of ``InvalidRequestError`` (incl. ``UnknownApiKeyError``) or ``UnsupportedVersionError``
— never another exception, never a hang (Hypothesis' deadline catches slow inputs).
"""

from __future__ import annotations

import datetime
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v5 import request as create_topics
from kio.schema.fetch.v12 import request as fetch12
from kio.schema.fetch.v16 import request as fetch16
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.metadata.v12 import request as metadata
from kio.schema.produce.v7 import request as produce7
from kio.schema.produce.v10 import request as produce10

from tidelog.protocol.codec import RequestHeader, decode_request, decode_response, encode_request
from tidelog.protocol.control import (
    ControlledShutdownRequest,
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
)
from tidelog.protocol.errors import (
    InvalidRequestError,
    InvalidResponseError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from tidelog.protocol.responses import (
    FetchPartitionResponse,
    FetchTopicResponse,
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_fetch_response,
    encode_produce_response,
)

ms = datetime.timedelta(milliseconds=1)
BATCH = bytes(range(70))


def _corpus() -> list[bytes]:
    bodies = [
        ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.16"),
        produce10.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=ms,
            topic_data=(
                produce10.TopicProduceData(
                    name="events",
                    partition_data=(produce10.PartitionProduceData(index=0, records=BATCH),),
                ),
            ),
        ),
        produce7.ProduceRequest(
            transactional_id="tx",
            acks=1,
            timeout=ms,
            topic_data=(
                produce7.TopicProduceData(
                    name="e",
                    partition_data=(produce7.PartitionProduceData(index=3, records=BATCH),),
                ),
            ),
        ),
        fetch16.FetchRequest(
            max_wait=ms,
            min_bytes=1,
            topics=(
                fetch16.FetchTopic(
                    topic_id=uuid.UUID(int=99),
                    partitions=(
                        fetch16.FetchPartition(partition=0, fetch_offset=10, partition_max_bytes=9),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        ),
        fetch12.FetchRequest(
            max_wait=ms,
            min_bytes=1,
            replica_id=2,
            topics=(
                fetch12.FetchTopic(
                    topic="t",
                    partitions=(
                        fetch12.FetchPartition(partition=1, fetch_offset=5, partition_max_bytes=9),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        ),
        metadata.MetadataRequest(
            topics=(metadata.MetadataRequestTopic(topic_id=None, name="x"),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        ),
        list_offsets.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(
                list_offsets.ListOffsetsTopic(
                    name="t",
                    partitions=(
                        list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1),
                    ),
                ),
            ),
        ),
        create_topics.CreateTopicsRequest(
            topics=(
                create_topics.CreatableTopic(
                    name="n",
                    num_partitions=3,
                    replication_factor=1,
                    assignments=(),
                    configs=(create_topics.CreatableTopicConfig(name="retention.ms", value="1"),),
                ),
            ),
        ),
        LeaderAndIsrRequest(
            controller_id=1,
            controller_epoch=2,
            broker_epoch=3,
            partition_states=(
                LeaderAndIsrPartitionState(
                    topic_name="t",
                    partition_index=0,
                    controller_epoch=2,
                    leader=1,
                    leader_epoch=4,
                    isr=(1, 2),
                    partition_epoch=5,
                    replicas=(1, 2, 3),
                ),
            ),
            live_leaders=(LeaderAndIsrLiveLeader(broker_id=1, host_name="h", port=9092),),
        ),
        ControlledShutdownRequest(broker_id=3, broker_epoch=9),
    ]
    return [
        encode_request(RequestHeader(b.__api_key__, b.__version__, 7, "fuzz"), b)[4:]
        for b in bodies
    ]


CORPUS = _corpus()
ALLOWED = (InvalidRequestError, UnsupportedVersionError)


def _decode(frame: bytes) -> None:
    error: Exception | None = None
    try:
        header, _body = decode_request(frame)
    except ALLOWED as exc:
        error = exc
    if error is None:
        assert isinstance(header, RequestHeader)
        return
    # What the server logs and acts on: a message, and the header whenever it was readable.
    assert str(error)
    if isinstance(error, UnknownApiKeyError):
        assert error.header is not None
        assert "unknown API key" in str(error)
    if isinstance(error, UnsupportedVersionError):
        assert error.header is not None


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes(frame: bytes) -> None:
    _decode(frame)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    frame = bytearray(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "overwrite", "big"]))
        pos = draw(st.integers(0, max(len(frame) - 1, 0)))
        if kind == "flip" and frame:
            frame[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del frame[pos:]
        elif kind == "insert":
            frame[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "overwrite":
            data = draw(st.binary(min_size=1, max_size=8))
            frame[pos : pos + len(data)] = data
        else:  # a length field turned huge or negative
            frame[pos : pos + 4] = draw(
                st.sampled_from(
                    [
                        b"\x7f\xff\xff\xff",
                        b"\xff\xff\xff\xfe",
                        b"\xff\xff\xff\x7f",
                        b"\x80\x80\x80\x80",
                    ]
                )
            )
    return bytes(frame)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_valid_requests(frame: bytes) -> None:
    _decode(frame)


def test_corpus_decodes() -> None:
    for frame in CORPUS:
        header, _body = decode_request(frame)
        assert header.correlation_id == 7
        assert header.client_id == "fuzz"


def _response_corpus() -> list[tuple[int, int, bytes]]:
    topics = [
        FetchTopicResponse(
            topic="t",
            topic_id=uuid.UUID(int=5),
            partitions=[
                FetchPartitionResponse(
                    partition_index=0,
                    high_watermark=9,
                    records=BATCH,
                    aborted_transactions=[(1, 2)],
                    current_leader=(1, 4),
                )
            ],
        )
    ]
    produce_topics = [
        ProduceTopicResponse(
            name="t",
            partitions=[ProducePartitionResponse(index=0, record_errors=[(0, "bad")])],
        )
    ]
    out = []
    for version in (4, 11, 12, 16):
        (wire,) = encode_fetch_response(3, version, topics)
        assert isinstance(wire, bytes)
        out.append((1, version, wire[4:]))
    for version in (7, 9, 10):
        out.append((0, version, encode_produce_response(3, version, produce_topics)[4:]))
    return out


RESPONSES = _response_corpus()


@settings(max_examples=800, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(RESPONSES), st.data())
def test_mutated_responses_raise_only_invalid_response(
    case: tuple[int, int, bytes], data: st.DataObject
) -> None:
    api_key, version, wire = case
    frame = bytearray(wire)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(frame) - 1))
        if data.draw(st.booleans()):
            frame[pos : pos + 4] = data.draw(st.binary(min_size=1, max_size=5))
        else:
            del frame[pos:]
            if not frame:
                break
    error: Exception | None = None
    try:
        correlation_id, _body = decode_response(api_key, version, bytes(frame))
    except InvalidResponseError as exc:
        error = exc
    if error is None:
        assert isinstance(correlation_id, int)
    else:
        assert "response" in str(error)
