"""Bad input against a live broker: each gets Kafka's error code or that one connection is
closed; the broker keeps serving everyone else and nothing already written is lost."""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import time
import uuid

import pytest

from tests.harness import BrokerProcess, api_versions_round_trip
from tests.integration.rawclient import (
    FETCH_V,
    METADATA_V,
    PRODUCE_V,
    Raw,
    batch,
    create,
    fetch,
    produce,
)
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import decode_response

pytestmark = pytest.mark.integration


@pytest.fixture
def topic_with_data(broker: BrokerProcess) -> tuple[str, list[bytes]]:
    """A topic holding three known records, checked again after each bad input."""
    name = f"bad-{uuid.uuid4().hex[:8]}"
    raw = Raw(broker)
    assert create(raw, name).error_code == ErrorCode.NONE
    values = [b"one", b"two", b"three"]
    assert produce(raw, name, 0, batch(*values)).error_code == ErrorCode.NONE
    raw.close()
    return name, values


def assert_still_serving(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    assert broker.alive()
    assert api_versions_round_trip(broker.host, broker.port)
    raw = Raw(broker)
    part = fetch(raw, topic, 0, 0)
    raw.close()
    assert part.error_code == ErrorCode.NONE
    assert part.high_watermark == len(values)
    for v in values:
        assert v in part.records


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"\x00\x00\x00\x05hello", id="garbage-frame"),
        pytest.param(b"\xff\xff\xff\xfe", id="negative-size"),
        pytest.param(struct.pack(">i", 200 * 1024 * 1024), id="above-socket.request.max.bytes"),
        pytest.param(struct.pack(">ihhih", 8, 999, 0, 1, -1), id="unknown-api-key"),
        pytest.param(struct.pack(">ihhih", 8, 3, 99, 1, -1), id="unsupported-metadata-version"),
        pytest.param(
            struct.pack(">ihhih", 14, 0, 9, 1, 0) + b"\x00\x05abc", id="truncated-produce-body"
        ),
    ],
)
def test_bad_frames_close_only_that_connection(
    broker: BrokerProcess, topic_with_data: tuple[str, list[bytes]], garbage: bytes
) -> None:
    bystander = Raw(broker)  # another client, connected before and after
    raw = Raw(broker)
    raw.send_bytes(garbage)
    assert raw.is_closed_by_peer()
    raw.close()
    body = bystander.call(ApiKey.METADATA, METADATA_V, {"topics": None})
    assert body.brokers[0].port == broker.port
    bystander.close()
    assert_still_serving(broker, *topic_with_data)


def test_truncated_frame_then_hang_up(
    broker: BrokerProcess, topic_with_data: tuple[str, list[bytes]]
) -> None:
    raw = Raw(broker)
    _cid, frame = raw.encode(
        ApiKey.PRODUCE,
        PRODUCE_V,
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [
                {
                    "name": topic_with_data[0],
                    "partition_data": [{"index": 0, "records": batch(b"lost")}],
                }
            ],
        },
    )
    raw.send_bytes(frame[: len(frame) // 2])
    raw.close()
    assert_still_serving(broker, *topic_with_data)  # the half request wrote nothing


def test_api_versions_newer_than_ours_gets_35_with_our_ranges(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    raw.send_bytes(struct.pack(">ihhih", 10, 18, 99, 5, 0))
    frame = raw.recv_frame()
    assert frame is not None
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, frame)
    assert correlation_id == 5
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert ranges[ApiKey.PRODUCE][0] == 3
    assert ranges[ApiKey.FETCH][0] == 4
    assert ranges[ApiKey.API_VERSIONS] == (0, 4)
    # The same connection then works with a version we share.
    versions = raw.call(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    assert versions.error_code == ErrorCode.NONE
    raw.close()


def test_bad_batches_get_kafka_errors_and_write_nothing(
    broker: BrokerProcess, topic_with_data: tuple[str, list[bytes]]
) -> None:
    topic, values = topic_with_data
    raw = Raw(broker)
    good = batch(b"four")
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # a record byte: the CRC-32C no longer matches
    assert produce(raw, topic, 0, bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    # Two batches, the second corrupt: the first must not be written either.
    assert produce(raw, topic, 0, good + bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    truncated = good[:-3]
    assert produce(raw, topic, 0, truncated).error_code == ErrorCode.CORRUPT_MESSAGE
    # Larger than message.max.bytes (1048588 by default).
    big = batch(b"x" * 1_100_000)
    assert produce(raw, topic, 0, big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    # Unknown topic, unknown partition, illegal topic name.
    assert produce(raw, f"nope-{uuid.uuid4().hex}", 0, good).error_code == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert produce(raw, topic, 7, good).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(raw, "bad/name", 0, good).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert produce(raw, topic, 0, good, acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    raw.close()
    # acks=0 gets no response, so a failed acks=0 produce closes the connection (as Kafka).
    raw = Raw(broker)
    _cid, frame = raw.encode(
        ApiKey.PRODUCE,
        PRODUCE_V,
        {
            "acks": 0,
            "timeout": 1000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": bytes(corrupt)}]}
            ],
        },
    )
    raw.send_bytes(frame)
    assert raw.is_closed_by_peer()
    raw.close()
    assert_still_serving(broker, topic, values)


def test_admin_errors(broker: BrokerProcess, topic_with_data: tuple[str, list[bytes]]) -> None:
    topic, values = topic_with_data
    raw = Raw(broker)
    md = raw.call(
        ApiKey.METADATA,
        METADATA_V,
        {
            "topics": [{"name": "bad name"}, {"name": "x" * 250}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
    )
    assert [t.error_code for t in md.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION] * 2
    assert create(raw, f"cfg-{uuid.uuid4().hex[:6]}", **{"segment.bytes": "1"}).error_code == (
        ErrorCode.INVALID_CONFIG
    )
    assert create(raw, f"cfg-{uuid.uuid4().hex[:6]}", **{"no.such.config": "1"}).error_code == (
        ErrorCode.INVALID_CONFIG
    )
    assert create(raw, "..").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    altered = raw.call(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": topic,
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "-7"}],
                },
                {
                    "resource_type": 2,
                    "resource_name": "missing-topic",
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}],
                },
            ],
            "validate_only": False,
        },
    )
    assert [r.error_code for r in altered.responses] == [
        ErrorCode.INVALID_CONFIG,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    part = fetch(raw, topic, 0, 1000)
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    part = fetch(raw, topic, 5, 0)
    assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    raw.close()
    assert_still_serving(broker, topic, values)


def test_pipelined_requests_are_answered_in_order(
    broker: BrokerProcess, topic_with_data: tuple[str, list[bytes]]
) -> None:
    """A long-poll fetch first, then quick requests: answers still come back in order, and
    the fetch is woken by a produce pipelined behind it on another connection."""
    topic, values = topic_with_data
    raw = Raw(broker)
    frames = []
    ids = []
    fetch_body = {
        "replica_id": -1,
        "max_wait": 5000,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": len(values), "partition_max_bytes": 1 << 20}
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    cid, frame = raw.encode(ApiKey.FETCH, FETCH_V, fetch_body)
    ids.append((cid, ApiKey.FETCH, FETCH_V))
    frames.append(frame)
    for _ in range(20):
        cid, frame = raw.encode(ApiKey.METADATA, METADATA_V, {"topics": None})
        ids.append((cid, ApiKey.METADATA, METADATA_V))
        frames.append(frame)
    raw.send_bytes(b"".join(frames))
    time.sleep(0.3)
    other = Raw(broker)
    assert produce(other, topic, 0, batch(b"wake")).error_code == ErrorCode.NONE
    other.close()
    answers = []
    for _ in ids:
        frame = raw.recv_frame()
        assert frame is not None
        answers.append(frame)
    assert [struct.unpack_from(">i", f)[0] for f in answers] == [cid for cid, _, _ in ids]
    _cid, fetched = decode_response(ApiKey.FETCH, FETCH_V, answers[0])
    assert b"wake" in fetched.responses[0].partitions[0].records  # woken by the append
    raw.close()
    assert_still_serving(broker, topic, [*values, b"wake"])


def test_fuzzed_requests_never_take_the_broker_down(
    broker: BrokerProcess, topic_with_data: tuple[str, list[bytes]]
) -> None:
    """Random mutations of valid requests for a few seconds: every connection either gets
    answers or is closed; the broker survives and the data is intact."""
    topic, values = topic_with_data
    rng = random.Random(20261122)
    seeds = []
    raw = Raw(broker)
    for api, version, data in [
        (ApiKey.METADATA, METADATA_V, {"topics": [{"name": topic}]}),
        (
            ApiKey.PRODUCE,
            PRODUCE_V,
            {
                "acks": 1,
                "timeout": 1000,
                "topic_data": [
                    {
                        "name": f"fuzz-{uuid.uuid4().hex[:6]}",
                        "partition_data": [{"index": 0, "records": batch(b"f")}],
                    }
                ],
            },
        ),
        (ApiKey.API_VERSIONS, 3, {"client_software_name": "f", "client_software_version": "1"}),
        (
            ApiKey.LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                ],
            },
        ),
    ]:
        seeds.append(raw.encode(api, version, data)[1])
    raw.close()
    deadline = time.monotonic() + 4.0
    cases = 0
    while time.monotonic() < deadline:
        frame = bytearray(rng.choice(seeds))
        # Mostly mutate the body (past the header and client id) so handlers see odd values.
        first = 4 + 10 + len("bad-input-test") if rng.random() < 0.8 else 4
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(first, len(frame))
            frame[i] = rng.randrange(256)
        if rng.random() < 0.2:
            frame = frame[: rng.randrange(4, len(frame))]
            struct.pack_into(">i", frame, 0, len(frame) - 4)
        s = socket.create_connection((broker.host, broker.port), timeout=5)
        try:
            s.sendall(bytes(frame))
            s.settimeout(0.5)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                s.recv(1 << 16)
        finally:
            s.close()
        cases += 1
    assert cases > 20
    assert_still_serving(broker, topic, values)
