"""The client's request builders and response readers, pure: requests are encoded and
decoded again by tidelog's codec, readers are fed kio response entities."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse as FindV3
from kio.schema.find_coordinator.v4.response import Coordinator
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse as FindV4
from kio.schema.produce.v9 import response as produce_v9

from tidelog.client.fetch import FetchRequestPartition, fetch_request
from tidelog.client.offsets import list_offsets_request, offset_for_leader_epoch_request
from tidelog.client.produce import ProduceResult, produce_request, read_produce
from tidelog.client.topic_admin import NewTopic, create_topics_request
from tidelog.client.transactions import (
    add_partitions_to_txn_request,
    find_coordinator_request,
    read_find_coordinator,
)
from tidelog.client.wire import error_code, make, ms, schema_module
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import EncodedRequest, RequestHeader, decode_request, encode_request

TP = TopicPartition("events", 2)


def round_trip(body: Any) -> Any:
    if isinstance(body, EncodedRequest):
        header = RequestHeader(body.api_key, body.api_version, 7, "t")
    else:
        header = RequestHeader(int(body.__api_key__), int(body.__version__), 7, "t")
    decoded_header, decoded = decode_request(encode_request(header, body)[4:])
    assert decoded_header == header
    return decoded


def test_make_drops_what_the_version_lacks() -> None:
    m0 = schema_module(ApiKey.INIT_PRODUCER_ID, 0)
    m3 = schema_module(ApiKey.INIT_PRODUCER_ID, 3)
    kwargs = {
        "transactional_id": None,
        "transaction_timeout": ms(1000),
        "producer_id": 5,
        "producer_epoch": 1,
    }
    assert not hasattr(make(m0.InitProducerIdRequest, **kwargs), "producer_id")
    assert make(m3.InitProducerIdRequest, **kwargs).producer_id == 5


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (0, ErrorCode.NONE),
        (6, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (32767, ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_error_code_maps_unknown_codes_to_unknown_server_error(wire: int, code: ErrorCode) -> None:
    assert error_code(wire) is code


def test_ms_is_a_timedelta() -> None:
    assert ms(1500) == datetime.timedelta(seconds=1.5)


@pytest.mark.parametrize("version", [3, 9])
def test_produce_request_round_trips(version: int) -> None:
    body = produce_request(version, TP, b"batch", acks=-1, timeout_ms=2000, transactional_id="x")
    decoded = round_trip(body)
    assert decoded == body
    (topic,) = body.topic_data
    assert (topic.name, topic.partition_data[0].index) == ("events", 2)


def test_read_produce_finds_its_partition_or_none() -> None:
    response = produce_v9.ProduceResponse(
        responses=(
            produce_v9.TopicProduceResponse(
                name="events",
                partition_responses=(
                    produce_v9.PartitionProduceResponse(
                        index=2,
                        error_code=0,
                        base_offset=41,
                        log_append_time=None,
                        log_start_offset=3,
                        record_errors=(),
                        error_message=None,
                    ),
                ),
            ),
        ),
        throttle_time=datetime.timedelta(0),
    )
    assert read_produce(response, TP) == ProduceResult(ErrorCode.NONE, 41, -1, 3, None)
    assert read_produce(response, TopicPartition("events", 0)) is None


@pytest.mark.parametrize("version", [4, 12])
def test_fetch_request_groups_partitions_by_topic(version: int) -> None:
    parts = {
        TP: FetchRequestPartition(10),
        TopicPartition("events", 0): FetchRequestPartition(5),
        TopicPartition("other", 0): FetchRequestPartition(0),
    }
    body = fetch_request(
        version,
        parts,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 20,
        replica_id=-1,
        isolation_level=1,
    )
    decoded = round_trip(body)
    if not isinstance(body, EncodedRequest):  # v12 is written by hand (test_fetch_request)
        assert decoded == body
    assert [(t.topic, [p.partition for p in t.partitions]) for t in decoded.topics] == [
        ("events", [2, 0]),
        ("other", [0]),
    ]


def test_offsets_requests_round_trip() -> None:
    listed = list_offsets_request(7, {TP: -1}, isolation_level=0)
    assert round_trip(listed) == listed
    epochs = offset_for_leader_epoch_request(4, {TP: (3, -1)}, replica_id=-2)
    assert round_trip(epochs) == epochs


def test_create_topics_request_sorts_assignments() -> None:
    body = create_topics_request(
        5,
        [NewTopic("t", assignments={1: [2, 3], 0: [1, 2]}, configs={"a": "b"})],
        timeout_ms=1000,
        validate_only=True,
    )
    assert round_trip(body) == body
    assert [a.partition_index for a in body.topics[0].assignments] == [0, 1]


def test_add_partitions_to_txn_request_sorts_topics_and_partitions() -> None:
    tps = [TopicPartition("b", 1), TopicPartition("a", 3), TopicPartition("b", 0)]
    body = add_partitions_to_txn_request(3, "tx", 9, 1, tps)
    assert round_trip(body) == body
    assert [(t.name, t.partitions) for t in body.v3_and_below_topics] == [
        ("a", (3,)),
        ("b", (0, 1)),
    ]


def test_find_coordinator_batches_from_v4() -> None:
    assert find_coordinator_request(4, "g", 0).coordinator_keys == ("g",)
    assert find_coordinator_request(3, "g", 0).key == "g"
    v4 = FindV4(
        throttle_time=datetime.timedelta(0),
        coordinators=(
            Coordinator(key="g", node_id=2, host="h", port=9, error_code=0, error_message=None),
        ),
    )
    found = read_find_coordinator(4, v4, "g")
    assert found is not None
    assert (found.node_id, found.host, found.port) == (2, "h", 9)
    assert read_find_coordinator(4, v4, "other") is None
    v3 = FindV3(
        throttle_time=datetime.timedelta(0),
        error_code=15,
        error_message="no",
        node_id=-1,
        host="",
        port=-1,
    )
    missing = read_find_coordinator(3, v3, "g")
    assert missing is not None
    assert missing.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
