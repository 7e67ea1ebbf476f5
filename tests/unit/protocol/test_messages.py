"""One version-independent description builds the response of every version."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, decode_response, encode_response
from tidelog.protocol.messages import build

TOPIC_ID = uuid.UUID(int=42)
DATA = {
    "brokers": [{"node_id": 1, "host": "h", "port": 9}],
    "cluster_id": "c",
    "controller_id": 1,
    "topics": [
        {
            "error_code": ErrorCode.NONE,
            "name": "t",
            "topic_id": TOPIC_ID,
            "partitions": [
                {
                    "error_code": 0,
                    "partition_index": 0,
                    "leader_id": 1,
                    "leader_epoch": 3,
                    "replica_nodes": [1],
                    "isr_nodes": [1],
                }
            ],
        }
    ],
    "throttle_time": 5,
}


@pytest.mark.parametrize("version", range(4, 14))
def test_metadata_every_version_round_trips(version: int) -> None:
    body = build(load_response_schema(ApiKey.METADATA, version), DATA)
    header = RequestHeader(ApiKey.METADATA, version, 9, "x")
    correlation_id, decoded = decode_response(
        ApiKey.METADATA, version, encode_response(header, body)[4:]
    )
    assert correlation_id == 9
    assert decoded.topics[0].name == "t"
    if version >= 7:  # leader_epoch exists from v7
        assert decoded.topics[0].partitions[0].leader_epoch == 3
    assert decoded.throttle_time == datetime.timedelta(milliseconds=5)
    assert decoded.topics[0].error_code is KioErrorCode.none
    if version >= 10:
        assert decoded.topics[0].topic_id == TOPIC_ID


def test_missing_required_fields_get_kafka_zero_values() -> None:
    body = build(load_response_schema(ApiKey.DESCRIBE_CLUSTER, 1), {"cluster_id": "c"})
    assert body.error_code is KioErrorCode.none
    assert body.brokers == ()
    assert body.throttle_time == datetime.timedelta(0)
