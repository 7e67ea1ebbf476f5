"""Cross-check against aiokafka's own codec at the versions it uses (Fetch <= v11,
Produce <= v7, Metadata <= v5: non-flexible ones)."""

from __future__ import annotations

import io
import struct

import pytest
from aiokafka.protocol import fetch, metadata, produce

from tidelog.protocol.codec import RequestHeader, decode_request
from tidelog.protocol.responses import (
    FetchPartitionResponse,
    FetchTopicResponse,
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_fetch_response,
    encode_produce_response,
)


def _header_v1(api_key: int, version: int, correlation_id: int) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, 7) + b"aiokafk"


@pytest.mark.parametrize("version", [4, 5, 7, 11])
def test_fetch_responses_decode_in_aiokafka(version: int) -> None:
    (wire,) = encode_fetch_response(
        9,
        version,
        [
            FetchTopicResponse(
                topic="t",
                partitions=[
                    FetchPartitionResponse(
                        partition_index=1,
                        high_watermark=5,
                        last_stable_offset=5,
                        log_start_offset=2,
                        records=b"batch",
                    ),
                    FetchPartitionResponse(partition_index=2, error_code=6),
                ],
            )
        ],
    )
    assert isinstance(wire, bytes)
    (correlation_id,) = struct.unpack_from(">i", wire, 4)
    assert correlation_id == 9
    theirs = getattr(fetch, f"FetchResponse_v{version}").decode(io.BytesIO(wire[8:]))
    ((topic, partitions),) = theirs.topics
    assert topic == "t"
    first, second = partitions
    assert (first[0], first[1], first[2]) == (1, 0, 5)
    assert first[-1] == b"batch"
    assert (second[0], second[1], second[-1]) == (2, 6, b"")


@pytest.mark.parametrize("version", [3, 5, 7])
def test_produce_responses_decode_in_aiokafka(version: int) -> None:
    wire = encode_produce_response(
        4,
        version,
        [
            ProduceTopicResponse(
                name="t",
                partitions=[ProducePartitionResponse(index=0, base_offset=42, log_start_offset=1)],
            )
        ],
        throttle_time_ms=8,
    )
    theirs = getattr(produce, f"ProduceResponse_v{version}").decode(io.BytesIO(wire[8:]))
    ((topic, ((partition, error_code, offset, *_rest),)),) = theirs.topics
    assert (topic, partition, error_code, offset) == ("t", 0, 0, 42)
    assert theirs.throttle_time_ms == 8


@pytest.mark.parametrize("version", [3, 7])
def test_aiokafka_produce_requests_decode(version: int) -> None:
    request = getattr(produce, f"ProduceRequest_v{version}")(None, -1, 1000, [("t", [(0, b"xyz")])])
    header, body = decode_request(_header_v1(0, version, 5) + request.encode())
    assert header == RequestHeader(0, version, 5, "aiokafk")
    assert body.acks == -1
    assert body.topic_data[0].partition_data[0].records == b"xyz"


def test_aiokafka_fetch_v11_request_decodes() -> None:
    request = fetch.FetchRequest_v11(
        -1,
        500,
        1,
        1 << 20,
        0,
        0,
        -1,
        [("t", [(0, -1, 17, -1, 1 << 20)])],
        [],
        "",
    )
    header, body = decode_request(_header_v1(1, 11, 6) + request.encode())
    assert header.api_version == 11
    partition = body.topics[0].partitions[0]
    assert (partition.partition, partition.fetch_offset) == (0, 17)


def test_aiokafka_metadata_v5_request_decodes() -> None:
    request = metadata.MetadataRequest_v5(["a", "b"], False)
    _header, body = decode_request(_header_v1(3, 5, 1) + request.encode())
    assert [t.name for t in body.topics] == ["a", "b"]
